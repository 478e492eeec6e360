package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/delaywheel/delaywheel/transport/client"
)

// probeTimeout bounds the question to each address of an --addr list.
const probeTimeout = 3 * time.Second

// addrList splits addrs, a comma-separated list, into its addresses, and
// its grpc:// or grpcs:// scheme, which the list's first address carries
// for all ("" over HTTP).
func addrList(addrs string) (scheme string, list []string) {
	rest := addrs
	if client.IsGRPC(addrs) {
		scheme, rest, _ = strings.Cut(addrs, "://")
		scheme += "://"
	}
	for _, a := range strings.Split(rest, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	return scheme, list
}

// pickHTTP returns the first address of addrs, a comma-separated list of
// HTTP addresses, whose node answers GET /healthz. A single address is
// taken as it is unless probe is set (a command that would otherwise
// retry it forever). With none answering it fails, naming every address
// and the last error.
func pickHTTP(ctx context.Context, addrs string, probe bool) (string, error) {
	_, list := addrList(addrs)
	i, err := firstAnswering(ctx, addrs, list, probe, func(ctx context.Context, a string) error {
		return client.New(a).Healthz(ctx)
	})
	if err != nil {
		return "", err
	}
	return list[i], nil
}

// pickGRPC is pickHTTP for a list of gRPC addresses, asked for the
// cluster view with token: it returns the list from the first address
// that answers on, so that the client calls that one first and moves
// round the others when it is not the leader.
func pickGRPC(ctx context.Context, addrs, token string, probe bool) (string, error) {
	scheme, list := addrList(addrs)
	i, err := firstAnswering(ctx, addrs, list, probe, func(ctx context.Context, a string) error {
		g, err := client.NewGRPC(scheme+a, client.WithGRPCToken(token))
		if err != nil {
			return err
		}
		defer g.Close()
		// A node that answers, if only to refuse (a bad token), is there.
		var ce *client.Error
		if _, err = g.Cluster(ctx); errors.As(err, &ce) && ce.Status != http.StatusServiceUnavailable && ce.Status != http.StatusGatewayTimeout {
			return nil
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return scheme + strings.Join(append(list[i:], list[:i]...), ","), nil
}

// firstAnswering returns the index of the first address of list (of
// addrs, as given) that ask answers without an error; a single address
// is not asked unless probe is set.
func firstAnswering(ctx context.Context, addrs string, list []string, probe bool, ask func(ctx context.Context, addr string) error) (int, error) {
	switch {
	case len(list) == 0:
		return 0, fmt.Errorf("--addr %q: no address", addrs)
	case len(list) == 1 && !probe:
		return 0, nil
	}
	var last error
	for i, a := range list {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		last = ask(pctx, a)
		cancel()
		if last == nil {
			return i, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return 0, &cliError{msg: fmt.Sprintf("--addr: no node answers at %s (last: %v)", strings.Join(list, ", "), cleanError(last)), err: last}
}
