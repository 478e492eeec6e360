package main

import (
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// testingImporters are the packages outside this module allowed to import
// testing into the server binary, each with its reason. hashicorp/raft
// ships its own test cluster in its non-test file testing.go (through
// v1.8.0, the newest), so the testing package stays linked in until it
// stops doing so.
var testingImporters = []string{"github.com/hashicorp/raft"}

// The server binary carries no test code: no package of the module
// imports testing, no test kit (a package whose path ends in "test", as
// replication/repltest, replication/nettest, transport/transporttest or
// wheel/wheeltest) is among its dependencies, and only testingImporters
// bring testing in.
func TestBinaryHasNoTestKits(t *testing.T) {
	goBin, err := exec.LookPath("go") // go test puts its own go first in PATH
	if err != nil {
		t.Fatalf("the go command: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}{{range .Imports}} {{.}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var importers []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		pkg, std, imports := f[0], f[1] == "true", f[2:]
		if !std && strings.HasSuffix(path.Base(pkg), "test") {
			t.Errorf("test kit %s is in the server binary's dependencies", pkg)
		}
		if slices.Contains(imports, "testing") {
			importers = append(importers, pkg)
			if !slices.Contains(testingImporters, pkg) {
				t.Errorf("%s imports testing into the server binary", pkg)
			}
		}
	}
	for _, pkg := range testingImporters {
		if !slices.Contains(importers, pkg) {
			t.Errorf("%s no longer imports testing: drop it from testingImporters", pkg)
		}
	}
}
