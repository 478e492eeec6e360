package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/delaywheel/delaywheel/segment/diskuse"
)

// proc is a server process the harness started. Its output goes to a log
// file in its directory, whose tail is quoted when it fails.
type proc struct {
	name   string
	bin    string
	args   []string
	dir    string // working directory
	log    string // stdout and stderr
	logger *slog.Logger

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process exited
	exitErr error
}

func newProc(logger *slog.Logger, name, dir, bin string, args ...string) *proc {
	return &proc{name: name, bin: bin, args: args, dir: dir, log: filepath.Join(dir, name+".log"), logger: logger}
}

// Start starts the process. It runs in its own process group, so that a
// Ctrl-C at the terminal reaches only the harness, which stops it itself.
func (p *proc) Start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s (%s): %w", p.name, p.bin, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.exitErr = cmd, done, nil
	p.mu.Unlock()
	p.logger.Debug("started", "process", p.name, "pid", cmd.Process.Pid, "args", strings.Join(p.args, " "))
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// state returns the running command and its exit channel (nil before Start,
// and for a nil proc: a target the harness did not spawn).
func (p *proc) state() (*exec.Cmd, chan struct{}) {
	if p == nil {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// Exited is closed once the process exited; nil before Start.
func (p *proc) Exited() <-chan struct{} {
	_, done := p.state()
	return done
}

// Running reports whether the process was started and has not exited.
func (p *proc) Running() bool {
	_, done := p.state()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// PID is the process id, 0 before Start.
func (p *proc) PID() int {
	cmd, _ := p.state()
	if cmd == nil || cmd.Process == nil {
		return 0
	}
	return cmd.Process.Pid
}

// Stop sends SIGTERM and waits for the exit, then SIGKILL after timeout. It
// returns how long the process took to exit.
func (p *proc) Stop(timeout time.Duration) (time.Duration, error) {
	cmd, done := p.state()
	if cmd == nil || !p.Running() {
		return 0, nil
	}
	t0 := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return 0, fmt.Errorf("stop %s: %w", p.name, err)
	}
	select {
	case <-done:
		return time.Since(t0), nil
	case <-time.After(timeout):
	}
	p.logger.Warn("process did not stop in time; killing it", "process", p.name, "timeout", timeout)
	if err := p.Kill(); err != nil {
		return time.Since(t0), err
	}
	return time.Since(t0), fmt.Errorf("stop %s: no exit within %s of SIGTERM, killed", p.name, timeout)
}

// Kill sends SIGKILL and waits for the exit.
func (p *proc) Kill() error {
	cmd, done := p.state()
	if cmd == nil || !p.Running() {
		return nil
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-done
	return nil
}

// livePID is the pid of the running process, whose what (for the error)
// is about to be read.
func (p *proc) livePID(what string) (int, error) {
	if p == nil {
		return 0, errNotSpawned
	}
	pid := p.PID()
	if pid == 0 || !p.Running() {
		return 0, fmt.Errorf("%s of %s: not running", what, p.name)
	}
	return pid, nil
}

// CPU returns the CPU time the running process has used.
func (p *proc) CPU() (time.Duration, error) {
	pid, err := p.livePID("cpu time")
	if err != nil {
		return 0, err
	}
	return cpuOf(pid)
}

// Mem is the process's resident memory, from /proc/<pid>/status.
func (p *proc) Mem() (memUsage, error) {
	pid, err := p.livePID("resident memory")
	if err != nil {
		return unknownMem(), err
	}
	return memOf(pid)
}

// LogTail returns the last n lines of the process's output.
func (p *proc) LogTail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// failure wraps err with the process's last output lines.
func (p *proc) failure(err error) error {
	tail := p.LogTail(15)
	if tail == "" {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return fmt.Errorf("%s: %w; its last output (%s):\n%s", p.name, err, p.log, tail)
}

// waitReady calls probe every few milliseconds until it succeeds, the process
// exits, timeout passes or ctx ends.
func waitReady(parent context.Context, p *proc, timeout time.Duration, probe func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		last = probe(pctx)
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.Exited():
			return p.failure(errors.New("exited before it was ready"))
		case <-ctx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("%s: waiting until ready: %w", p.name, parent.Err())
			}
			return p.failure(fmt.Errorf("not ready after %s: %w", timeout, last))
		case <-tick.C:
		}
	}
}

// freePorts returns n distinct free TCP ports on the loopback interface.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// dirSize is the total size of the regular files under dir, a file with
// several hard links under it counted once (delaywheel's snapshots share
// their tables with the live store through hard links).
func dirSize(dir string) (int64, error) {
	var c diskuse.Counter
	n, err := c.Add(dir)
	if err != nil {
		return -1, err
	}
	return n, nil
}

// mkdirAll creates dir and its parents.
func mkdirAll(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}

// footprint is the resident memory of p and the size of the files under dir.
func footprint(p *proc, dir string) (resources, error) {
	m, err := p.Mem()
	if err != nil {
		return resources{RSSBytes: -1, RSSAnonBytes: -1, RSSFileBytes: -1, DiskBytes: -1}, err
	}
	disk, err := dirSize(dir)
	return resources{RSSBytes: m.RSS, RSSAnonBytes: m.Anon, RSSFileBytes: m.File, DiskBytes: disk}, err
}

// restartProc stops p with SIGTERM, starts it again and waits until ready
// succeeds.
func restartProc(ctx context.Context, p *proc, ready func(context.Context) error) (restartTimes, error) {
	var rt restartTimes
	var err error
	if rt.Stop, err = p.Stop(time.Minute); err != nil {
		return rt, fmt.Errorf("restart: %w", err)
	}
	t0 := time.Now()
	if err := p.Start(); err != nil {
		return rt, fmt.Errorf("restart: %w", err)
	}
	if err := ready(ctx); err != nil {
		return rt, fmt.Errorf("restart: %w", err)
	}
	rt.Ready = time.Since(t0)
	return rt, nil
}
