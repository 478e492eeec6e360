package systemtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/delaywheel/delaywheel/transport/client"
)

// Server is one delaywheel process of a Cluster (or its data dir while it is
// not running).
type Server struct {
	ID        string
	IP        string
	HTTPAddr  string // client API, listen and advertised
	RaftAddr  string // Raft listen address (--raft-addr)
	GRPCAddr  string // gRPC API (--grpc-addr)
	Advertise string // the proxy's address (--raft-advertise)
	DataDir   string
	LogPath   string // stdout and stderr of every run, appended
	Proxy     *Proxy
	Client    *client.Client

	bin         string
	flags       []string
	clusterArgs []string

	mu     sync.Mutex
	proc   *proc
	paused bool
	starts int
}

type proc struct {
	cmd   *exec.Cmd
	done  chan struct{}
	state *os.ProcessState
	err   error
}

// Args returns the command line the node runs with (without the binary).
func (n *Server) Args() []string {
	args := []string{"server",
		"--node-id", n.ID,
		"--data-dir", n.DataDir,
		"--http-addr", n.HTTPAddr,
		"--raft-addr", n.RaftAddr,
		"--raft-advertise", n.Advertise,
		"--grpc-addr", n.GRPCAddr,
	}
	args = append(args, n.clusterArgs...)
	return append(args, n.flags...)
}

// SetFlags replaces the extra server flags used from the next Start on.
func (n *Server) SetFlags(flags ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.flags = flags
}

// Start starts the process; it fails if it is already running.
func (n *Server) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !n.exitedLocked() {
		return fmt.Errorf("%s is already running", n.ID)
	}
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.starts++
	args := n.Args()
	fmt.Fprintf(f, "==== %s start #%d: delaywheel %s\n", time.Now().Format(time.RFC3339Nano), n.starts, strings.Join(args, " "))
	cmd := exec.Command(n.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	n.proc, n.paused = p, false
	go func() {
		p.err = cmd.Wait()
		p.state = cmd.ProcessState
		fmt.Fprintf(f, "==== %s exit: %v\n", time.Now().Format(time.RFC3339Nano), p.state)
		f.Close()
		close(p.done)
	}()
	return nil
}

func (n *Server) exitedLocked() bool {
	select {
	case <-n.proc.done:
		return true
	default:
		return false
	}
}

// Running reports whether the process is running (paused counts).
func (n *Server) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.exitedLocked()
}

// Paused reports whether the process is stopped by SIGSTOP.
func (n *Server) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paused
}

// Exited returns a channel closed when the current process exits (nil when
// never started).
func (n *Server) Exited() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return nil
	}
	return n.proc.done
}

// ExitCode is the exit code of the last process once it has exited: -1
// when killed by a signal or still running.
func (n *Server) ExitCode() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || n.proc.state == nil {
		return -1
	}
	return n.proc.state.ExitCode()
}

func (n *Server) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || n.exitedLocked() {
		return fmt.Errorf("%s is not running", n.ID)
	}
	if err := n.proc.cmd.Process.Signal(sig); err != nil {
		return err
	}
	switch sig {
	case syscall.SIGSTOP:
		n.paused = true
	case syscall.SIGCONT:
		n.paused = false
	}
	return nil
}

// Kill sends SIGKILL and waits for the process to go. It does nothing when
// the node is not running.
func (n *Server) Kill() {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
}

// Stop sends SIGTERM and waits for the process to exit, up to ctx. It
// returns an error unless the process exited with code 0.
func (n *Server) Stop(ctx context.Context) error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%s was never started", n.ID)
	}
	if err := n.signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("%s did not exit after SIGTERM: %w", n.ID, ctx.Err())
	}
	if code := p.state.ExitCode(); code != 0 {
		return fmt.Errorf("%s exited with %v after SIGTERM; log:\n%s", n.ID, p.state, n.LogTail(20))
	}
	return nil
}

// Pause stops the process with SIGSTOP.
func (n *Server) Pause() error { return n.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (n *Server) Resume() error { return n.signal(syscall.SIGCONT) }

// Restart kills the process if it runs and starts it again on the same
// data dir, addresses and flags.
func (n *Server) Restart() error {
	n.Kill()
	return n.Start()
}

// WaitReady waits until the node answers /readyz with 200. It gives up
// early, with the log's tail, when the process exits.
func (n *Server) WaitReady(ctx context.Context) error {
	return n.waitFor(ctx, "ready", n.Client.Readyz, time.Second, 50*time.Millisecond)
}

// waitServing waits until the node answers /healthz, which it serves only
// once it holds all its listen addresses. It fails, with the log's tail,
// when the process exits first. Its probes are short: a port taken by a
// process that never answers must not hide the node's exit for long.
func (n *Server) waitServing(ctx context.Context) error {
	return n.waitFor(ctx, "serving HTTP", n.Client.Healthz, 500*time.Millisecond, 20*time.Millisecond)
}

// waitFor calls probe, each call bounded by timeout, every pause until it
// succeeds, ctx ends or the process exits; state names what a success
// means, for the errors.
func (n *Server) waitFor(ctx context.Context, state string, probe func(context.Context) error, timeout, pause time.Duration) error {
	exited := n.Exited()
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		last := probe(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited (code %d) before it was %s; log:\n%s", n.ID, n.ExitCode(), state, n.LogTail(30))
		case <-ctx.Done():
			return fmt.Errorf("%s not %s: %w (last: %v)", n.ID, state, ctx.Err(), last)
		case <-time.After(pause):
		}
	}
}

// lastRun returns the log of the node's last run: from its start line on.
func (n *Server) lastRun() string {
	n.mu.Lock()
	k := n.starts
	n.mu.Unlock()
	log := n.Log()
	if i := strings.LastIndex(log, fmt.Sprintf(" start #%d: ", k)); i >= 0 {
		return log[i:]
	}
	return log
}

// Log returns everything the node has written so far, over all its runs.
func (n *Server) Log() string {
	b, _ := os.ReadFile(n.LogPath)
	return string(b)
}

// LogContains reports whether the log has a line containing s.
func (n *Server) LogContains(s string) bool {
	return strings.Contains(n.Log(), s)
}

// LogCount counts the log lines containing s.
func (n *Server) LogCount(s string) int {
	return strings.Count(n.Log(), s)
}

// LogTail returns the last lines of the node's log.
func (n *Server) LogTail(lines int) string {
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	var all []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// Eventually calls f until it returns nil or ctx ends, and returns f's last
// error then.
func Eventually(ctx context.Context, every time.Duration, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(every):
		}
	}
}
