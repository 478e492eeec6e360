package transport

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/service"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// reserveID leases one ready, delayed or dead message by its id, whatever
// its due time (POST /v1/messages/{id}/reserve), and answers it as a
// reserve of one.
func (s *Server) reserveID(r *http.Request) (any, error) {
	var req api.ReserveByIDRequest
	id, err := idAndBody(r, &req, true)
	if err != nil {
		return nil, err
	}
	_, _, ttrMs, err := service.ValidateReserve(api.ReserveRequest{TTRMs: req.TTRMs}, s.cfg.Limits)
	if err != nil {
		return nil, err
	}
	d, err := routingOf(r).rt.ReserveID(r.Context(), id, time.Duration(ttrMs)*time.Millisecond)
	if err != nil {
		return nil, err
	}
	return stream(func(w http.ResponseWriter) error {
		return writeBody(w, http.StatusOK, "application/json", appendReserved(make([]byte, 0, 272), []model.Delivery{d}))
	}), nil
}

// ReserveID passes a reserve by id on to the leader at to.
func (p parts) ReserveID(ctx context.Context, to model.Member, id model.ID, ttr time.Duration) (model.Delivery, uint64, error) {
	var req api.ReserveByIDRequest
	if ttr > 0 {
		ms := ttr.Milliseconds()
		req.TTRMs = &ms
	}
	var out api.ReserveResponse
	index, err := p.do(ctx, to, id.Group(), http.MethodPost, "/v1/messages/"+id.String()+"/reserve", req, &out)
	if err != nil {
		return model.Delivery{}, 0, err
	}
	if len(out.Messages) != 1 {
		return model.Delivery{}, 0, fmt.Errorf("%w: the leader answered a reserve by id with %d deliveries", model.ErrUnavailable, len(out.Messages))
	}
	d, err := deliveryFrom(out.Messages[0])
	if err != nil {
		return model.Delivery{}, 0, fmt.Errorf("transport: group %d's delivery: %w", id.Group(), err)
	}
	return d, index, nil
}
