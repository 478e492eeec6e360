package service

import (
	"context"
	"time"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// IDReserver is what a Forwarder implements when it can pass ReserveID on
// to a group's leader. One that does not leaves ReserveID to the nodes
// that lead the id's group: elsewhere it is a NotLeaderError.
type IDReserver interface {
	ReserveID(ctx context.Context, to model.Member, id model.ID, ttr time.Duration) (model.Delivery, uint64, error)
}

// ReserveID leases one ready, delayed or dead message by its id for ttr
// (0: its own time-to-run), in the group the id names (Backend.ReserveID).
func (r *Router) ReserveID(ctx context.Context, id model.ID, ttr time.Duration) (model.Delivery, error) {
	g, err := r.GroupOfID("id", id)
	if err != nil {
		return model.Delivery{}, err
	}
	return Call(ctx, r, g, func(b Backend) (model.Delivery, error) { return b.ReserveID(ctx, id, ttr) },
		func(f Forwarder, to model.Member) (model.Delivery, uint64, error) {
			ir, ok := f.(IDReserver)
			if !ok {
				return model.Delivery{}, 0, ErrNoForward
			}
			return ir.ReserveID(ctx, to, id, ttr)
		})
}
