package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/delaywheel/delaywheel/transport/client"
)

// probeTimeout bounds the question (GET /healthz) to each address of an
// --addr list.
const probeTimeout = 3 * time.Second

// pickHTTP returns the first address of addrs, a comma-separated list of
// HTTP addresses, whose node answers GET /healthz. A single address is
// taken as it is unless probe is set (a command that would otherwise
// retry it forever). With none answering it fails, naming every address
// and the last error.
func pickHTTP(ctx context.Context, addrs string, probe bool) (string, error) {
	var list []string
	for _, a := range strings.Split(addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	switch {
	case len(list) == 0:
		return "", fmt.Errorf("--addr %q: no address", addrs)
	case len(list) == 1 && !probe:
		return list[0], nil
	}
	var last error
	for _, a := range list {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		last = client.New(a).Healthz(pctx)
		cancel()
		if last == nil {
			return a, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return "", &cliError{msg: fmt.Sprintf("--addr: no node answers at %s (last: %v)", strings.Join(list, ", "), cleanError(last)), err: last}
}
