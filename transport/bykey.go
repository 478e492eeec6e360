package transport

import (
	"net/http"

	"github.com/delaywheel/delaywheel/transport/service"
)

// getKey answers GET /v1/topics/{topic}/keys/{key} with the message, as
// GET /v1/messages/{id} does.
func (s *Server) getKey(r *http.Request) (any, error) {
	topic, key, err := s.pathTopicKey(r)
	if err != nil {
		return nil, err
	}
	v, err := s.be(r).GetByKey(r.Context(), topic, key)
	return viewOf(v), err
}

// pathTopicKey checks the {topic} and the {key} of the path.
func (s *Server) pathTopicKey(r *http.Request) (topic, key string, err error) {
	if topic, err = s.pathTopic(r); err != nil {
		return "", "", err
	}
	key = r.PathValue("key")
	if err := service.ValidateKey(key, s.cfg.Limits); err != nil {
		return "", "", err
	}
	return topic, key, nil
}
