package bench

import (
	"errors"
	"time"
)

// ServerCPU is the CPU time the spawned servers used over a window of a
// run: every node's user and system time, added up. On one machine that
// is what the cluster costs per message, a figure that noise from other
// processes on a shared machine moves far less than latency.
type ServerCPU struct {
	Seconds   float64 `json:"cpu_s"`              // CPU time, all nodes
	Cores     float64 `json:"cores"`              // CPU time ÷ the window's length
	PerMsgUs  float64 `json:"us_per_msg"`         // CPU time ÷ the messages of the window
	WindowS   float64 `json:"window_s"`           // the window's length
	LeaderSec float64 `json:"leader_cpu_s"`       // of which the leader's
	Messages  int     `json:"messages,omitempty"` // the messages of the window
}

// cpuReader is a target that can read its spawned servers' CPU time:
// all of them, and the leader's.
type cpuReader interface {
	serverCPU() (all, leader time.Duration, err error)
}

// cpuWindow measures the servers' CPU time from its start to its end.
type cpuWindow struct {
	r           cpuReader
	at          time.Time
	all, leader time.Duration
	err         error
}

// startCPU opens a window on t's servers; a target that cannot read them
// gives a window whose end reports nothing.
func startCPU(t target) *cpuWindow {
	r, ok := t.(cpuReader)
	if !ok {
		return &cpuWindow{err: errors.New("not a spawned delaywheel")}
	}
	w := &cpuWindow{r: r, at: time.Now()}
	w.all, w.leader, w.err = r.serverCPU()
	return w
}

// end closes the window over msgs messages; nil when the CPU time could
// not be read.
func (w *cpuWindow) end(msgs int) *ServerCPU {
	if w.err != nil {
		return nil
	}
	all, leader, err := w.r.serverCPU()
	if err != nil {
		return nil
	}
	s := (all - w.all).Seconds()
	win := time.Since(w.at).Seconds()
	c := &ServerCPU{Seconds: round3(s), WindowS: round3(win), LeaderSec: round3((leader - w.leader).Seconds()), Messages: msgs}
	if win > 0 {
		c.Cores = round3(s / win)
	}
	if msgs > 0 {
		c.PerMsgUs = round3(s * 1e6 / float64(msgs))
	}
	return c
}
