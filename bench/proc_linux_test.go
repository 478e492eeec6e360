package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseStatusMem(t *testing.T) {
	st := []byte("Name:\tredis-server\nVmPeak:\t  999 kB\nVmRSS:\t    8192 kB\nRssAnon:\t    6144 kB\nRssFile:\t    2048 kB\nRssShmem:\t       0 kB\nThreads:\t5\n")
	m, err := parseStatusMem(st)
	if err != nil {
		t.Fatal(err)
	}
	if want := (memUsage{RSS: 8192 << 10, Anon: 6144 << 10, File: 2048 << 10}); m != want {
		t.Fatalf("parseStatusMem = %+v, want %+v", m, want)
	}

	// A kernel without the parts: VmRSS alone, the parts unknown.
	m, err = parseStatusMem([]byte("Name:\tx\nVmRSS:\t  100 kB\n"))
	if err != nil || m.RSS != 100<<10 || m.Anon != -1 || m.File != -1 {
		t.Fatalf("parseStatusMem(VmRSS only) = %+v, %v", m, err)
	}

	if _, err := parseStatusMem([]byte("Name:\tx\nRssAnon:\t 5 kB\n")); err == nil {
		t.Fatal("no VmRSS line parsed")
	}
	if _, err := parseStatusMem([]byte("VmRSS:\t 5 MB\n")); err == nil {
		t.Fatal("a size not in kB parsed")
	}
}

func TestMemOfSelf(t *testing.T) {
	m, err := memOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.Anon <= 0 || m.File <= 0 || m.Anon+m.File > m.RSS {
		t.Fatalf("memOf(self) = %+v: want RSS > 0 holding anonymous and file pages", m)
	}
}

func TestParseStatCPU(t *testing.T) {
	// The command name may hold spaces and parentheses: fields count from
	// its last ')'. utime 250 and stime 75 ticks are 3.25 s.
	st := []byte("4242 (dw (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0 99 1000 200\n")
	d, err := parseStatCPU(st)
	if err != nil || d != 3250*time.Millisecond {
		t.Fatalf("parseStatCPU = %v, %v; want 3.25s", d, err)
	}
	for name, b := range map[string]string{
		"no name":   "4242 S 1",
		"short":     "4242 (x) S 1 2 3",
		"not a num": "4242 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 2x 75 0",
	} {
		if _, err := parseStatCPU([]byte(b)); err == nil {
			t.Errorf("%s: parsed %q", name, b)
		}
	}
}

func TestCPUOfSelf(t *testing.T) {
	before, err := cpuOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the kernel has counted at least a tick more.
	for {
		d, err := cpuOf(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if d > before {
			return
		}
	}
}

// TestServerCPUOfGivenPIDs: a cluster reached by address measures the pids
// it was given, as a spawned server is measured, and knows no leader.
func TestServerCPUOfGivenPIDs(t *testing.T) {
	if _, _, err := (&dwTarget{}).serverCPU(); err == nil {
		t.Fatal("a cluster neither spawned nor given pids read a CPU time")
	}
	tg := &dwTarget{pids: []int{os.Getpid(), os.Getpid()}}
	w := startCPU(tg)
	if w.err != nil {
		t.Fatal(w.err)
	}
	for {
		all, leader, err := tg.serverCPU()
		if err != nil {
			t.Fatal(err)
		}
		if leader != -1 {
			t.Fatalf("leader CPU %v, want -1 (not known)", leader)
		}
		if all > w.all {
			break
		}
	}
	c := w.end(10)
	if c == nil || c.Seconds <= 0 || c.PerMsgUs <= 0 || c.LeaderSec != -1 {
		t.Fatalf("window %+v: want CPU per message and no leader", c)
	}
	if (&cpuWindow{err: errNotSpawned}).end(10) != nil {
		t.Fatal("a window that could not start reported CPU")
	}
}
