package wheel

import "fmt"

// KeyID returns the id of the pending message of topic that holds key, or
// an error wrapping ErrNotFound when no pending message holds it.
func (s *Store) KeyID(topic, key string) (ID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkOpen(); err != nil {
		return ID{}, err
	}
	tid, ok := s.topics[topic]
	if !ok {
		return ID{}, fmt.Errorf("%w: topic %q holds no key %q", ErrNotFound, topic, key)
	}
	v, err := s.get(keyIndexKey(tid, key))
	if err != nil {
		return ID{}, err
	}
	if v == nil {
		return ID{}, fmt.Errorf("%w: no pending message of topic %q holds key %q", ErrNotFound, topic, key)
	}
	return IDFromBytes(v)
}
