package dispatch

import (
	"github.com/delaywheel/delaywheel/wheel/model"
)

// Settling tells the streams that handed out rs that an ack or nack of
// them is in the log's order: they free its room (stream.Settling). The
// node calls it once it has submitted the ack, and Settled once it applied.
func (d *Dispatcher) Settling(rs []model.Receipt) {
	d.byStream(rs, false, (*stream).Settling)
}

// Settled tells the streams that the leases of rs ended: the node calls
// it once an ack or nack of them has applied.
func (d *Dispatcher) Settled(rs []model.Receipt) {
	d.byStream(rs, true, (*stream).settle)
}

// byStream calls f, outside smu, with the receipts of rs that a stream
// handed out, grouped by that stream; with forget, the dispatcher stops
// routing them. An ack's receipts are most often all of one stream's
// delivery: those go to f as they are.
func (d *Dispatcher) byStream(rs []model.Receipt, forget bool, f func(*stream, []model.Receipt)) {
	d.smu.Lock()
	if s, ok := d.oneStreamLocked(rs); ok {
		if s != nil && forget {
			for _, r := range rs {
				delete(d.streams, r)
			}
		}
		d.smu.Unlock()
		if s != nil {
			f(s, rs)
		}
		return
	}
	by := map[*stream][]model.Receipt{}
	for _, r := range rs {
		if s, ok := d.streams[r]; ok {
			if forget {
				delete(d.streams, r)
			}
			by[s] = append(by[s], r)
		}
	}
	d.smu.Unlock()
	for s, rs := range by {
		f(s, rs)
	}
}

// oneStreamLocked reports whether the receipts of rs that streams handed
// out are all of rs and all of one stream (returned), or none of them (nil).
func (d *Dispatcher) oneStreamLocked(rs []model.Receipt) (*stream, bool) {
	var one *stream
	found := 0
	for _, r := range rs {
		s, ok := d.streams[r]
		if !ok {
			continue
		}
		if one != nil && s != one {
			return nil, false
		}
		one = s
		found++
	}
	return one, found == 0 || found == len(rs)
}
