package wheel

import (
	"fmt"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// KeyID returns the id of the pending message of topic that holds key, or
// an error wrapping ErrNotFound when no pending message holds it.
func (s *Store) KeyID(topic, key string) (model.ID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return model.ID{}, err
	}
	tid, ok := s.topics[topic]
	if !ok {
		return model.ID{}, fmt.Errorf("%w: topic %q holds no key %q", model.ErrNotFound, topic, key)
	}
	v, err := s.get(keyIndexKey(tid, key))
	if err != nil {
		return model.ID{}, err
	}
	if v == nil {
		return model.ID{}, fmt.Errorf("%w: no pending message of topic %q holds key %q", model.ErrNotFound, topic, key)
	}
	return model.IDFromBytes(v)
}
