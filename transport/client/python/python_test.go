package python_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/cmd/delaywheel/systemtest"
	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/transport/client"
)

// python is Debian's interpreter, which has Debian's python3-grpcio and
// python3-protobuf; a python3 earlier on PATH (pyenv, a venv) may not.
const python = "/usr/bin/python3"

// needTools skips the test, in one line, unless what example.py needs for
// both APIs is installed.
func needTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"protoc", "grpc_python_plugin", python} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found (apt-get install protobuf-compiler protobuf-compiler-grpc python3-grpcio python3-protobuf)", tool)
		}
	}
	if out, err := exec.Command(python, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import grpc and google.protobuf (apt-get install python3-grpcio python3-protobuf): %s", python, strings.TrimSpace(string(out)))
	}
}

// TestExample runs example.py, as the README says, against a real
// single-node server that requires a token: over HTTP and over gRPC it
// enqueues a delayed message, reserves it, checks it and acks it. The
// server must then hold nothing of either topic. With a wrong token it
// must fail on each API, naming the server's reason.
func TestExample(t *testing.T) {
	needTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := systemtest.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokenFile, wrongFile := filepath.Join(dir, "token"), filepath.Join(dir, "wrong")
	if err := os.WriteFile(tokenFile, []byte("python-example-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wrongFile, []byte("wrong"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The harness waits for a leader through calls without the token:
	// wait here for /readyz, which needs none.
	c := systemtest.NewCluster(t, bin, systemtest.Options{Flags: []string{"--auth-token-file", tokenFile}, NoWait: true})
	n := c.Servers()[0]
	cl := client.New("http://"+n.HTTPAddr, client.WithToken("python-example-token"))
	nettest.WaitFor(t, time.Minute, n.HTTPAddr+" to be ready", func() bool { return cl.Readyz(ctx) == nil })

	cmd := exec.CommandContext(ctx, python, "example.py", "--http", "http://"+n.HTTPAddr, "--grpc", n.GRPCAddr,
		"--token-file", tokenFile, "--topic", "py", "--delay-ms", "300")
	out, err := cmd.CombinedOutput()
	t.Logf("example.py:\n%s", out)
	if err != nil {
		t.Fatalf("example.py: %v", err)
	}
	for _, want := range []string{
		"http: acked 1, stale 0; the message is gone (404)\n",
		"grpc: acked 1, stale 0; the message is gone (NOT_FOUND)\n",
		"ok: http grpc\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("example.py's output lacks %q", want)
		}
	}

	topics, err := cl.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, tc := range topics {
		seen[tc.Topic] = true
		if tc.Delayed+tc.Ready+tc.Reserved+tc.Dead != 0 {
			t.Errorf("topic %s still holds messages after the example acked them: %+v", tc.Topic, tc)
		}
	}
	if !seen["py.http"] || !seen["py.grpc"] {
		t.Errorf("topics %v: want py.http and py.grpc, which the example used", topics)
	}

	for _, api := range [][]string{{"--http", "http://" + n.HTTPAddr}, {"--grpc", n.GRPCAddr}} {
		args := append([]string{"example.py", "--token-file", wrongFile}, api...)
		out, err := exec.CommandContext(ctx, python, args...).CombinedOutput()
		if err == nil || strings.Contains(string(out), "ok:") || !strings.Contains(string(out), "wrong bearer token") {
			t.Errorf("example.py %s with a wrong token: err %v, output:\n%s\nwant exit 1 naming the wrong bearer token", api[0], err, out)
		}
	}
}
