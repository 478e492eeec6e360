package bench

import (
	"errors"
	"time"
)

// ServerCPU is the CPU time the servers used over a window of a run:
// every node's user and system time, added up, for a server the harness
// spawned or whose pid it was given (Config.ServerPIDs). On one machine that
// is what the cluster costs per message, a figure that noise from other
// processes on a shared machine moves far less than latency.
type ServerCPU struct {
	Seconds   float64 `json:"cpu_s"`              // CPU time, all nodes
	Cores     float64 `json:"cores"`              // CPU time ÷ the window's length
	PerMsgUs  float64 `json:"us_per_msg"`         // CPU time ÷ the messages of the window
	WindowS   float64 `json:"window_s"`           // the window's length
	LeaderSec float64 `json:"leader_cpu_s"`       // of which the leader's (-1: not known)
	Messages  int     `json:"messages,omitempty"` // the messages of the window
}

// cpuReader is a target that can read its servers' CPU time: all of
// them, and the leader's (-1 when it cannot tell which one leads).
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
		return &cpuWindow{err: errors.New("no server pid to read the CPU time of")}
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
	c := &ServerCPU{Seconds: round3(s), WindowS: round3(win), LeaderSec: -1, Messages: msgs}
	if leader >= 0 && w.leader >= 0 {
		c.LeaderSec = round3((leader - w.leader).Seconds())
	}
	if win > 0 {
		c.Cores = round3(s / win)
	}
	if msgs > 0 {
		c.PerMsgUs = round3(s * 1e6 / float64(msgs))
	}
	return c
}

// pidsCPU is serverCPU of a server the harness did not spawn: the CPU time
// of the processes it was given by pid (Config.ServerPIDs), added up from
// /proc. Which of them leads is not known (-1); with none given there is
// nothing to read (errNotSpawned).
func pidsCPU(pids []int) (all, leader time.Duration, err error) {
	if len(pids) == 0 {
		return 0, 0, errNotSpawned
	}
	for _, pid := range pids {
		d, err := cpuOf(pid)
		if err != nil {
			return 0, -1, err
		}
		all += d
	}
	return all, -1, nil
}

// serverCPU reads the CPU time of a spawned Redis: one process, which is
// its own leader.
func (t *redisTarget) serverCPU() (all, leader time.Duration, err error) {
	d, err := t.proc.CPU()
	return d, d, err
}

// serverCPU reads the CPU time of a spawned beanstalkd (one process), or
// of the running server's pids (Config.ServerPIDs).
func (t *bsTarget) serverCPU() (all, leader time.Duration, err error) {
	if t.proc == nil {
		return pidsCPU(t.pids)
	}
	d, err := t.proc.CPU()
	return d, d, err
}

// perMsgUs is c's CPU per message in µs for a table cell, "" when not measured.
func (c *ServerCPU) perMsgUs() string {
	if c == nil || c.Messages == 0 {
		return ""
	}
	return f1(c.PerMsgUs)
}
