package systemtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/client"
)

// run runs a command and returns its combined output.
func run(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// composeCommand returns the compose command line that works here:
// "docker compose" or "docker-compose".
func composeCommand(ctx context.Context) []string {
	if _, err := run(ctx, "", nil, "docker", "compose", "version"); err == nil {
		return []string{"docker", "compose"}
	}
	if _, err := exec.LookPath("docker-compose"); err == nil {
		if _, err := run(ctx, "", nil, "docker-compose", "version"); err == nil {
			return []string{"docker-compose"}
		}
	}
	return nil
}

// TestDockerCompose builds the image from the repository's Dockerfile (the
// static binary TestMain built, on scratch: nothing is pulled), starts the repository's
// compose file (three nodes published on localhost:7070, 7080, 7090),
// checks the cluster serves, stops the leader's container and checks the
// other two keep serving. It skips without a working Docker and compose.
func TestDockerCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("not with -short")
	}
	t.Parallel()
	ctx := ctxFor(t, 10*time.Minute)
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker on PATH")
	}
	infoCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := run(infoCtx, "", nil, "docker", "info")
	cancel()
	if err != nil {
		t.Skipf("docker is not usable: %v", err)
	}
	compose := composeCommand(ctx)
	if compose == nil {
		t.Skip("neither docker compose nor docker-compose works")
	}
	ports := []int{7070, 7080, 7090}
	for _, p := range append([]int{7072, 7082, 7092}, ports...) { // the gRPC ports too
		ln, err := net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", p))
		if err != nil {
			t.Skipf("port %d, which the compose file publishes, is taken: %v", p, err)
		}
		ln.Close()
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		t.Skipf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	composeFile := filepath.Join(root, "docker-compose.yml")

	// The image: a context holding only the static binary (Build sets
	// CGO_ENABLED=0) and the Dockerfile.
	bin := binary(t)
	bctx := t.TempDir()
	began := time.Now()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bctx, "delaywheel"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	df, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bctx, "Dockerfile"), df, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(ctx, bctx, nil, "docker", "build", "-t", "delaywheel:local", "."); err != nil {
		t.Fatalf("docker build: %v", err)
	} else {
		t.Logf("built delaywheel:local in %v:\n%s", time.Since(began).Round(time.Millisecond), lastLines(out, 3))
	}

	// The compose file requires a bearer token, read from a secret file.
	const token = "compose-test-token"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	project := fmt.Sprintf("dwsystest%d", time.Now().UnixNano()%1_000_000_000)
	dc := func(ctx context.Context, args ...string) (string, error) {
		full := append(append([]string{}, compose[1:]...), append([]string{"-p", project, "-f", composeFile}, args...)...)
		return run(ctx, root, []string{"DELAYWHEEL_TOKEN_FILE=" + tokenFile}, compose[0], full...)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if t.Failed() {
			if logs, err := dc(cctx, "logs", "--no-color", "--tail", "40"); err == nil {
				t.Logf("compose logs:\n%s", logs)
			}
		}
		start := time.Now()
		if out, err := dc(cctx, "down", "-v", "--remove-orphans"); err != nil {
			t.Errorf("compose down: %v\n%s", err, out)
		} else {
			t.Logf("compose down -v took %v", time.Since(start).Round(time.Millisecond))
		}
		// Make sure no volume of the project is left behind.
		if vols, err := run(cctx, "", nil, "docker", "volume", "ls", "-q", "--filter", "label=com.docker.compose.project="+project); err == nil {
			if names := strings.Fields(vols); len(names) > 0 {
				if out, err := run(cctx, "", nil, "docker", append([]string{"volume", "rm"}, names...)...); err != nil {
					t.Errorf("removing volumes %v: %v\n%s", names, err, out)
				}
			}
		}
	})
	if out, err := dc(ctx, "up", "-d", "--no-build"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}

	nodes := map[string]*client.Client{}
	for i, p := range ports {
		nodes[fmt.Sprintf("n%d", i+1)] = client.New(fmt.Sprintf("http://127.0.0.1:%d", p), client.WithHTTPClient(newHTTPClient()), client.WithToken(token))
	}
	// The APIs are published on loopback only.
	for i := range ports {
		out, err := dc(ctx, "port", fmt.Sprintf("n%d", i+1), "7070")
		if err != nil {
			t.Fatalf("compose port: %v", err)
		}
		if host := strings.TrimSpace(out); !strings.HasPrefix(host, "127.0.0.1:") {
			t.Errorf("n%d's API is published on %q, want 127.0.0.1 only", i+1, host)
		}
	}
	ready := func(ids ...string) string {
		t.Helper()
		var leader string
		err := Eventually(ctxFor(t, 120*time.Second), 250*time.Millisecond, func() error {
			leader = ""
			for _, id := range ids {
				rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err := nodes[id].Readyz(rctx)
				v, verr := nodes[id].Cluster(rctx)
				cancel()
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				if verr != nil {
					return fmt.Errorf("%s: %w", id, verr)
				}
				if leader != "" && v.Leader != leader {
					return fmt.Errorf("%s names leader %s, another node %s", id, v.Leader, leader)
				}
				leader = v.Leader
			}
			if !strings.Contains(strings.Join(ids, ","), leader) {
				return fmt.Errorf("leader %q is not one of %v", leader, ids)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("compose cluster not ready: %v", err)
		}
		return leader
	}
	serve := func(via, other string) {
		t.Helper()
		topic := "docker." + via + "." + other
		var res []api.Result
		err := Eventually(ctxFor(t, 30*time.Second), 200*time.Millisecond, func() error {
			var err error
			res, err = nodes[via].Enqueue(ctx, []api.Message{{Topic: topic, Payload: api.TextBody("hello"), DelayMs: api.Ptr(int64(100))}})
			return err
		})
		if err != nil {
			t.Fatalf("enqueue via %s: %v", via, err)
		}
		var ds []api.Delivery
		err = Eventually(ctxFor(t, 30*time.Second), 200*time.Millisecond, func() error {
			var err error
			ds, err = nodes[other].Reserve(ctx, topic, api.ReserveRequest{Max: api.Ptr(1), WaitMs: 2000})
			if err == nil && len(ds) == 0 {
				err = fmt.Errorf("nothing to reserve")
			}
			return err
		})
		if err != nil {
			t.Fatalf("reserve via %s: %v", other, err)
		}
		if ds[0].ID != res[0].ID {
			t.Fatalf("reserve via %s answered %s, want %s", other, ds[0].ID, res[0].ID)
		}
		if ack, err := nodes[via].Ack(ctx, []string{ds[0].Receipt}); err != nil || ack.Acked != 1 {
			t.Fatalf("ack via %s: %+v, %v", via, ack, err)
		}
	}

	leader := ready("n1", "n2", "n3")
	t.Logf("compose cluster up; leader %s", leader)
	// Without the token, the API refuses the call.
	anon := client.New("http://127.0.0.1:7070", client.WithHTTPClient(newHTTPClient()))
	var ce *client.Error
	if _, err := anon.Topics(ctx); !errors.As(err, &ce) || ce.Status != http.StatusUnauthorized {
		t.Fatalf("topics without the token: %v; want 401", err)
	}
	serve("n1", "n2")
	serve("n3", "n1")

	// Stop the leader's container (SIGTERM: a clean shutdown).
	if out, err := dc(ctx, "stop", leader); err != nil {
		t.Fatalf("stop %s: %v\n%s", leader, err, out)
	}
	if id, err := dc(ctx, "ps", "-q", leader); err == nil && strings.TrimSpace(id) != "" {
		code, err := run(ctx, "", nil, "docker", "inspect", "-f", "{{.State.ExitCode}}", strings.TrimSpace(id))
		if err == nil && strings.TrimSpace(code) != "0" {
			t.Errorf("container %s exited with code %s after docker stop", leader, strings.TrimSpace(code))
		}
	}
	var rest []string
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != leader {
			rest = append(rest, id)
		}
	}
	nl := ready(rest...)
	t.Logf("stopped %s; %s leads", leader, nl)
	serve(rest[0], rest[1])
	serve(rest[1], rest[0])
}
