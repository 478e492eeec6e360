package main

import (
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"

	"github.com/delaywheel/delaywheel/replication/nettest"
	"github.com/delaywheel/delaywheel/wheel/model"
)

// chartDir is the Helm chart, relative to this package.
const chartDir = "deploy/helm/delaywheel"

// helmBinary returns the helm that renders the chart: $HELM, else helm on
// PATH; without one the test is skipped (.ci/run provides a pinned one).
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm not found (set $HELM or put helm on PATH; .ci/run builds a pinned one)")
	}
	return h
}

// The parts of the rendered objects the tests read.
type (
	manifest struct {
		Kind     string `yaml:"kind"`
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Data map[string]string `yaml:"data"`
		Spec struct {
			ClusterIP                string        `yaml:"clusterIP"`
			PublishNotReadyAddresses bool          `yaml:"publishNotReadyAddresses"`
			Ports                    []servicePort `yaml:"ports"`
			MaxUnavailable           any           `yaml:"maxUnavailable"`
			ServiceName              string        `yaml:"serviceName"`
			Replicas                 int           `yaml:"replicas"`
			Template                 struct {
				Spec podSpec `yaml:"spec"`
			} `yaml:"template"`
			VolumeClaimTemplates []struct {
				Metadata struct {
					Name string `yaml:"name"`
				} `yaml:"metadata"`
			} `yaml:"volumeClaimTemplates"`
		} `yaml:"spec"`
	}
	servicePort struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort string `yaml:"targetPort"`
	}
	podSpec struct {
		Affinity struct {
			PodAntiAffinity struct {
				Required []struct {
					TopologyKey string `yaml:"topologyKey"`
				} `yaml:"requiredDuringSchedulingIgnoredDuringExecution"`
			} `yaml:"podAntiAffinity"`
		} `yaml:"affinity"`
		Containers []container `yaml:"containers"`
		Volumes    []struct {
			Name   string `yaml:"name"`
			Secret *struct {
				SecretName string `yaml:"secretName"`
			} `yaml:"secret"`
			ConfigMap *struct {
				Name string `yaml:"name"`
			} `yaml:"configMap"`
		} `yaml:"volumes"`
	}
	container struct {
		Name string   `yaml:"name"`
		Args []string `yaml:"args"`
		Env  []struct {
			Name      string `yaml:"name"`
			ValueFrom struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		StartupProbe   probe `yaml:"startupProbe"`
		LivenessProbe  probe `yaml:"livenessProbe"`
		ReadinessProbe probe `yaml:"readinessProbe"`
		VolumeMounts   []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	probe struct {
		HTTPGet struct {
			Path   string `yaml:"path"`
			Port   string `yaml:"port"`
			Scheme string `yaml:"scheme"`
		} `yaml:"httpGet"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	}
)

// rendered is a chart rendered by helm template.
type rendered struct {
	objects   []manifest
	namespace string
}

// render runs helm template on the chart as release name in namespace ns
// with --set values; it fails the test on an error.
func render(t *testing.T, helm, name, ns string, set ...string) rendered {
	t.Helper()
	out, err := renderErr(helm, name, ns, set...)
	if err != nil {
		t.Fatalf("helm template %v: %v", set, err)
	}
	r := rendered{namespace: ns}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var m manifest
		err := dec.Decode(&m)
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("decoding the rendered chart: %v\n%s", err, out)
		}
		if m.Kind != "" {
			r.objects = append(r.objects, m)
		}
	}
	return r
}

// renderErr runs helm template and returns its output, or its error with
// what it wrote.
func renderErr(helm, name, ns string, set ...string) (string, error) {
	// Read by this process, the chart's files are inputs go test's cache
	// knows: a changed chart runs the test again (helm reads them in
	// another process, which the cache does not see).
	err := filepath.WalkDir(chartDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			_, err = os.ReadFile(p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	args := []string{"template", name, chartDir, "--namespace", ns}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helm, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, stderr.String())
	}
	return string(out), nil
}

// one returns the only object of kind (and name, unless empty).
func (r rendered) one(t *testing.T, kind, name string) manifest {
	t.Helper()
	var found []manifest
	for _, m := range r.objects {
		if m.Kind == kind && (name == "" || m.Metadata.Name == name) {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s named %q rendered, want 1", len(found), kind, name)
	}
	return found[0]
}

// port returns the port of c named name.
func (c container) port(t *testing.T, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("the container has no port named %q", name)
	return 0
}

// varRef is a Kubernetes dependent variable in an argument: $(NAME).
var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podArgs returns the container's arguments as pod runs them: each $(VAR)
// replaced by the variable, which must be the pod's name from the downward
// API.
func (c container) podArgs(t *testing.T, pod string) []string {
	t.Helper()
	vars := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom.FieldRef.FieldPath == "metadata.name" {
			vars[e.Name] = pod
		}
	}
	var out []string
	for _, a := range c.Args {
		out = append(out, varRef.ReplaceAllStringFunc(a, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			v, ok := vars[name]
			if !ok {
				t.Fatalf("argument %q refers to $(%s), which is not the pod's name", a, name)
			}
			return v
		}))
	}
	return out
}

// serverFlagNames are the names of the server command's flags, from its
// definition: the binary's, not a copy.
func serverFlagNames() map[string]bool {
	names := map[string]bool{}
	for _, f := range serverCommand().Flags {
		for _, n := range f.Names() {
			names[n] = true
		}
	}
	return names
}

// parseServerArgs runs the server command's real flag parsing (and its
// --config loading) over args, without running a server, and returns what
// it parsed. Every --flag must be one of the server's.
func parseServerArgs(t *testing.T, args []string) *cli.Context {
	t.Helper()
	if len(args) == 0 || args[0] != "server" {
		t.Fatalf("args %q: want the server command first", args)
	}
	names := serverFlagNames()
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "--") || !names[name] {
			t.Errorf("argument %q is no flag of `delaywheel server`", a)
		}
	}
	var got *cli.Context
	cmd := serverCommand()
	cmd.Action = func(c *cli.Context) error { got = c; return nil }
	app := &cli.App{Name: "delaywheel", Commands: []*cli.Command{cmd}, Writer: os.Stderr, ErrWriter: os.Stderr}
	if err := app.Run(append([]string{"delaywheel"}, args...)); err != nil {
		t.Fatalf("delaywheel %q: %v", args, err)
	}
	return got
}

// hostPort splits addr, failing the test when it is no host:port.
func hostPort(t *testing.T, flag, addr string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	if err != nil || perr != nil {
		t.Fatalf("--%s %q: not host:port", flag, addr)
	}
	return host, n
}

// TestHelmChart renders the chart with every option on and checks, pod by
// pod, that the server's own flag parsing takes the arguments and the
// cluster file each pod gets, and that they agree with the rest of the
// chart: node ids from the ordinal, addresses on the headless Service's
// names with the container's ports, the first three pods forming the
// cluster and the others joining it, the data dir on the pod's volume, the
// token and certificates from their Secrets, the probes on the HTTP port.
func TestHelmChart(t *testing.T) {
	helm := helmBinary(t)
	const replicas, groups = 5, 3
	r := render(t, helm, "dw", "queues", "replicas=5", "groups=3", "tls.enabled=true", "tls.secretName=dw-tls",
		"tls.caKey=ca.crt", "raftTLS.enabled=true", "raftTLS.secretName=dw-raft-tls", "auth.existingSecret=dw-token")
	const full = "dw-delaywheel"
	sts := r.one(t, "StatefulSet", full)
	headless := r.one(t, "Service", sts.Spec.ServiceName)
	clientSvc := r.one(t, "Service", full)
	clusterFiles := r.one(t, "ConfigMap", full+"-cluster")
	if sts.Spec.Replicas != replicas || len(sts.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("statefulset: %d replicas, %d containers; want %d and 1", sts.Spec.Replicas, len(sts.Spec.Template.Spec.Containers), replicas)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	domain := fmt.Sprintf("%s.%s.svc.cluster.local", headless.Metadata.Name, r.namespace)
	volumes := map[string]string{} // volume -> its Secret or ConfigMap
	for _, v := range sts.Spec.Template.Spec.Volumes {
		switch {
		case v.Secret != nil:
			volumes[v.Name] = "secret/" + v.Secret.SecretName
		case v.ConfigMap != nil:
			volumes[v.Name] = "configmap/" + v.ConfigMap.Name
		}
	}
	// mounted returns the Secret or ConfigMap holding file, a path in the
	// container.
	mounted := func(file string) string {
		for _, m := range c.VolumeMounts {
			if path.Dir(file) == m.MountPath {
				return volumes[m.Name]
			}
		}
		return ""
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("%d volume claim templates, want 1 (one volume per pod)", len(sts.Spec.VolumeClaimTemplates))
	}
	claim := sts.Spec.VolumeClaimTemplates[0].Metadata.Name
	volumes[claim] = "claim/" + claim

	var members []string
	for i := range 3 {
		members = append(members, fmt.Sprintf("%s-%d=%s-%d.%s:%d", full, i, full, i, domain, c.port(t, "raft")))
	}
	names := serverFlagNames()
	for i := range replicas {
		pod := fmt.Sprintf("%s-%d", full, i)
		t.Run(pod, func(t *testing.T) {
			args := c.podArgs(t, pod)
			// The pod's cluster file, read with --config, from the
			// ConfigMap: written where the test can read it.
			var config string
			for j, a := range args {
				if v, ok := strings.CutPrefix(a, "--config="); ok {
					config = v
					file := filepath.Join(t.TempDir(), path.Base(v))
					args[j] = "--config=" + file
					content, ok := clusterFiles.Data[path.Base(v)]
					if !ok {
						t.Fatalf("--config %s: the ConfigMap has no %s", v, path.Base(v))
					}
					var keys map[string]any
					if err := yaml.Unmarshal([]byte(content), &keys); err != nil {
						t.Fatalf("%s: %v", v, err)
					}
					for k := range keys {
						if !names[k] {
							t.Errorf("%s: key %q is no flag of `delaywheel server`", v, k)
						}
					}
					if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			if mounted(config) != "configmap/"+clusterFiles.Metadata.Name {
				t.Errorf("--config %q is not a file of the mounted ConfigMap %s", config, clusterFiles.Metadata.Name)
			}
			p := parseServerArgs(t, args)
			if got := p.String("node-id"); got != pod {
				t.Errorf("--node-id %q, want the pod's name %q", got, pod)
			}
			if got := p.Int("groups"); got != groups {
				t.Errorf("--groups %d, want %d", got, groups)
			}
			if got := mounted(path.Join(p.String("data-dir"), "file")); got != "claim/"+claim {
				t.Errorf("--data-dir %q is on %q, want the mount of the pod's claim %s", p.String("data-dir"), got, claim)
			}
			for flag, port := range map[string]string{"http-addr": "http", "grpc-addr": "grpc", "raft-addr": "raft"} {
				host, n := hostPort(t, flag, p.String(flag))
				if host != pod+"."+domain || n != c.port(t, port) {
					t.Errorf("--%s %q, want %s.%s:%d (the pod's name, container port %s)", flag, p.String(flag), pod, domain, c.port(t, port), port)
				}
			}
			for flag, from := range map[string]string{
				"auth-token-file": "secret/dw-token", "tls-cert-file": "secret/dw-tls", "tls-key-file": "secret/dw-tls",
				"tls-ca-file": "secret/dw-tls", "raft-tls-cert-file": "secret/dw-raft-tls", "raft-tls-key-file": "secret/dw-raft-tls",
				"raft-tls-ca-file": "secret/dw-raft-tls",
			} {
				if got := mounted(p.String(flag)); got != from {
					t.Errorf("--%s %q is in %q, want a file of %s", flag, p.String(flag), got, from)
				}
			}
			if i < 3 {
				initial, err := parseInitialCluster(p.String("initial-cluster"))
				var got []string
				for _, m := range initial {
					got = append(got, m.ID+"="+m.RaftAddr)
				}
				if err != nil || !slices.Equal(got, members) || p.String("join") != "" {
					t.Errorf("--initial-cluster %q (%v), --join %q; want %q and no --join", p.String("initial-cluster"), err, p.String("join"), members)
				}
			} else {
				want := fmt.Sprintf("https://%s.%s.svc.cluster.local:%d", clientSvc.Metadata.Name, r.namespace, c.port(t, "http"))
				if p.String("join") != want || p.String("initial-cluster") != "" {
					t.Errorf("--join %q, --initial-cluster %q; want --join %q (the client Service) alone", p.String("join"), p.String("initial-cluster"), want)
				}
			}
		})
	}

	for name, pr := range map[string]struct {
		probe
		path string
	}{"startup": {c.StartupProbe, "/healthz"}, "liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
		if g := pr.HTTPGet; g.Path != pr.path || g.Port != "http" || g.Scheme != "HTTPS" {
			t.Errorf("%s probe %+v: want %s on the port named http (%d), over HTTPS", name, g, pr.path, c.port(t, "http"))
		}
	}
	if budget := time.Duration(c.StartupProbe.PeriodSeconds*c.StartupProbe.FailureThreshold) * time.Second; budget < 30*time.Minute {
		t.Errorf("the startup probe gives a node %v to restore its snapshot and replay its log; want at least 30m", budget)
	}

	if headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("headless service: clusterIP %q, publishNotReadyAddresses %v; want None and true", headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	for svc, want := range map[string][]string{headless.Metadata.Name: {"http", "grpc", "raft"}, clientSvc.Metadata.Name: {"http", "grpc"}} {
		var got []string
		for _, p := range r.one(t, "Service", svc).Spec.Ports {
			if p.Port != c.port(t, p.TargetPort) {
				t.Errorf("service %s: port %s is %d, the container's %d", svc, p.Name, p.Port, c.port(t, p.TargetPort))
			}
			got = append(got, p.TargetPort)
		}
		if !slices.Equal(got, want) {
			t.Errorf("service %s serves %v, want %v", svc, got, want)
		}
	}
	if pdb := r.one(t, "PodDisruptionBudget", full); fmt.Sprint(pdb.Spec.MaxUnavailable) != "1" {
		t.Errorf("pod disruption budget: maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}
	if req := sts.Spec.Template.Spec.Affinity.PodAntiAffinity.Required; len(req) != 1 || req[0].TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("pod anti-affinity %+v: want one required term across kubernetes.io/hostname", req)
	}
}

// TestHelmChartRefuses renders the chart at the binary's largest --groups
// and one past it, where the chart refuses what the server would, and
// refuses a new cluster of fewer pods than its initial members.
func TestHelmChartRefuses(t *testing.T) {
	helm := helmBinary(t)
	if _, err := renderErr(helm, "dw", "q", fmt.Sprintf("groups=%d", model.MaxGroups)); err != nil {
		t.Errorf("groups=%d: %v", model.MaxGroups, err)
	}
	for _, bad := range []int{0, model.MaxGroups + 1} {
		_, err := renderErr(helm, "dw", "q", fmt.Sprintf("groups=%d", bad))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("groups %d: want 1 to %d", bad, model.MaxGroups)) {
			t.Errorf("groups=%d: %v; want it refused naming the bound %d", bad, err, model.MaxGroups)
		}
	}
	if _, err := renderErr(helm, "dw", "q", "replicas=2"); err == nil || !strings.Contains(err.Error(), "replicas 2 is below initialMembers 3") {
		t.Errorf("replicas=2: %v; want it refused: a new cluster of 3 members needs 3 pods", err)
	}
	if _, err := renderErr(helm, "dw", "q", "replicas=1", "initialMembers=1"); err != nil {
		t.Errorf("a single node (replicas=1, initialMembers=1): %v", err)
	}
}

// TestHelmChartServes runs a server in this process with the default
// render's arguments for pod 0 (its addresses moved to free ports on
// 127.0.0.1, its data dir and token file to the test's, and no cluster file,
// so that it starts a cluster of its own), and asks it what the probes ask:
// the startup and liveness paths answer 200 and the readiness path comes
// to 200, all without the token the API requires.
func TestHelmChartServes(t *testing.T) {
	helm := helmBinary(t)
	r := render(t, helm, "delaywheel", "default")
	c := r.one(t, "StatefulSet", "delaywheel").Spec.Template.Spec.Containers[0]
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("probe-test"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := nettest.FreeAddrs(t, 3)
	httpAddr := addrs[0]
	moved := map[string]string{
		"http-addr": httpAddr, "grpc-addr": addrs[1], "raft-addr": addrs[2],
		"data-dir": filepath.Join(dir, "data"), "auth-token-file": token,
	}
	var args []string
	for _, a := range c.podArgs(t, "delaywheel-0")[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		switch {
		case name == "config":
		case moved[name] != "":
			args = append(args, "--"+name+"="+moved[name])
		default:
			args = append(args, a)
		}
	}
	startServer(t, httpAddr, args...)
	get := func(p string) int {
		resp, err := http.Get("http://" + httpAddr + p)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for name, p := range map[string]probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe} {
		if got := get(p.HTTPGet.Path); got != http.StatusOK {
			t.Errorf("%s probe %s: %d, want 200", name, p.HTTPGet.Path, got)
		}
	}
	nettest.WaitFor(t, 30*time.Second, "the readiness probe's "+c.ReadinessProbe.HTTPGet.Path+" to answer 200", func() bool {
		return get(c.ReadinessProbe.HTTPGet.Path) == http.StatusOK
	})
	if got := get("/v1/topics"); got != http.StatusUnauthorized {
		t.Errorf("/v1/topics without the token: %d, want 401 (the chart's token is not applied)", got)
	}
}
