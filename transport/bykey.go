package transport

import (
	"context"
	"net/http"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
)

// KeyGetter is implemented by backends that find a pending message by its
// key (GET /v1/topics/{topic}/keys/{key}).
type KeyGetter interface {
	// GetByKey returns the pending message of topic that holds key.
	GetByKey(ctx context.Context, topic, key string) (wheel.View, error)
}

// getKey answers GET /v1/topics/{topic}/keys/{key} with the message, as
// GET /v1/messages/{id} does.
func (s *Server) getKey(r *http.Request) (any, error) {
	g, ok := s.be(r).(KeyGetter)
	if !ok {
		return nil, &Error{Status: http.StatusNotImplemented, Code: api.CodeInternal, Message: "this node cannot look messages up by key"}
	}
	topic, key, err := s.pathTopicKey(r)
	if err != nil {
		return nil, err
	}
	v, err := g.GetByKey(r.Context(), topic, key)
	return viewOf(v), err
}

// pathTopicKey checks the {topic} and the {key} of the path.
func (s *Server) pathTopicKey(r *http.Request) (topic, key string, err error) {
	if topic, err = s.pathTopic(r); err != nil {
		return "", "", err
	}
	key = r.PathValue("key")
	if err := ValidateKey(key, s.cfg.Limits); err != nil {
		return "", "", err
	}
	return topic, key, nil
}
