package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/bench"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport/client"
)

// Clients written by others, Pheanstalk (PHP) and beaneater (Ruby), run
// put with a delay, reserve, release, bury, kick and delete against a
// node's beanstalkd port (testdata/beanstalkd). Each skips when its
// interpreter or library is not installed (.ci/run installs them).
func TestBeanstalkdOtherClients(t *testing.T) {
	clients := []struct {
		name, interp, lib, script string
		args                      func(host, port string) []string
	}{
		{"pheanstalk", "php", "/usr/share/php/Pheanstalk/autoload.php", "pheanstalk.php",
			func(host, port string) []string { return []string{host, port} }},
		{"beaneater", "ruby", "/usr/lib/ruby/vendor_ruby/beaneater.rb", "beaneater.rb",
			func(host, port string) []string { return []string{net.JoinHostPort(host, port)} }},
	}
	var bsAddr string
	parent := t
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			bin, err := exec.LookPath(c.interp)
			if _, serr := os.Stat(c.lib); err != nil || serr != nil {
				t.Skipf("%s or %s not installed (apt-get install %s and its library)", c.interp, c.lib, c.interp)
			}
			if bsAddr == "" {
				bsAddr = startBeanstalkdNode(parent.Context(), parent)
			}
			host, port, _ := net.SplitHostPort(bsAddr)
			script, _ := filepath.Abs(filepath.Join("testdata", "beanstalkd", c.script))
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, append([]string{script}, c.args(host, port)...)...).CombinedOutput()
			if err != nil || string(out) != "ok\n" {
				t.Fatalf("%s %s: %v\n%s", c.interp, c.script, err, out)
			}
		})
	}
}

// startBeanstalkdNode starts a node of two groups with a beanstalkd port
// for the rest of the test t (not of a subtest), and returns the port's
// address once the node is ready.
func startBeanstalkdNode(ctx context.Context, t *testing.T) string {
	t.Helper()
	addrs := nettest.FreeAddrs(t, 3)
	httpAddr, bsAddr := addrs[0], addrs[1]
	startServer(t, httpAddr, "--node-id", "n1", "--data-dir", t.TempDir(), "--raft-addr", addrs[2],
		"--groups", "2", "--beanstalkd-addr", bsAddr)
	cl := client.New("http://" + httpAddr)
	nettest.WaitFor(t, 30*time.Second, "the node to be ready", func() bool { return cl.Readyz(ctx) == nil })
	return bsAddr
}

// bench fire drives a node's beanstalkd port as its beanstalkd target
// (--beanstalkd-target-addr): every job is delivered, none early.
func TestBenchBeanstalkdTargetAddr(t *testing.T) {
	addr := startBeanstalkdNode(t.Context(), t)
	out, err := run(t, "bench", "fire", "--targets", "beanstalkd", "--beanstalkd-target-addr", addr, "--json",
		"--rate", "100", "--duration", "2s", "--grace", "5s", "--producers", "1", "--consumers", "2", "--wait", "1s")
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	var rep bench.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	if len(rep.Results) != 1 || rep.Results[0].Fire == nil {
		t.Fatalf("report: %s", out)
	}
	if f := rep.Results[0].Fire; f.Sent != 200 || f.Received != 200 || f.Lost != 0 || f.Early != 0 {
		t.Fatalf("fire through the beanstalkd port: %+v", f)
	}
}
