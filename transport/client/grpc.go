package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/transport/api/pb"
)

// GRPC calls the gRPC API of a cluster, with the methods and types of
// Client: it is a drop-in for Client where its methods suffice. It knows
// the gRPC addresses of one or more nodes; a follower answers the calls
// only the leader answers with UNAVAILABLE (reason NOT_LEADER), and GRPC
// then moves on to the next address it knows, once round; but not when
// the answer names a group (its ErrorInfo's "group"): a call split over the groups
// of a cluster of many was answered in part, and the parts done stay
// done, so sending it again could enqueue them twice. A call that fails
// UNAVAILABLE otherwise (a node that cannot be reached, or has no leader)
// is not sent again, since it may have been done, but the next call goes
// to the next address. Every error answer is an *Error whose Code is the
// HTTP API's code, as over HTTP. It is safe for concurrent use.
type GRPC struct {
	conns []*grpc.ClientConn
	calls []pb.DelaywheelClient
	cur   atomic.Int64 // the address that answered last
	token string
	tls   *tls.Config
	raw   func(body []byte)
}

// GRPCOption configures a GRPC client.
type GRPCOption func(*GRPC)

// WithGRPCToken sends "authorization: Bearer <token>" with every call.
func WithGRPCToken(token string) GRPCOption { return func(g *GRPC) { g.token = token } }

// WithGRPCTLS calls over TLS with cfg ("grpcs://" addresses use TLS with
// the system's roots without it).
func WithGRPCTLS(cfg *tls.Config) GRPCOption { return func(g *GRPC) { g.tls = cfg } }

// WithGRPCRawResponse calls fn with the JSON form of every answer (the
// form the HTTP API gives), for printing.
func WithGRPCRawResponse(fn func(body []byte)) GRPCOption { return func(g *GRPC) { g.raw = fn } }

// IsGRPC reports whether addr names gRPC addresses ("grpc://" or
// "grpcs://"), which NewGRPC takes.
func IsGRPC(addr string) bool {
	return strings.HasPrefix(addr, "grpc://") || strings.HasPrefix(addr, "grpcs://")
}

// NewGRPC returns a client of the nodes at addrs: "grpc://host:port" or
// several, comma-separated ("grpc://n1:7072,n2:7072"); "grpcs://" for TLS;
// a bare "host:port" means grpc. It connects lazily, on the first call.
func NewGRPC(addrs string, opts ...GRPCOption) (*GRPC, error) {
	g := &GRPC{}
	for _, o := range opts {
		o(g)
	}
	rest, secure := strings.CutPrefix(addrs, "grpcs://")
	if !secure {
		rest = strings.TrimPrefix(addrs, "grpc://")
	}
	creds := insecure.NewCredentials()
	if secure || g.tls != nil {
		cfg := g.tls
		if cfg == nil {
			cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		creds = credentials.NewTLS(cfg)
	}
	for _, a := range strings.Split(rest, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxResponseBytes)))
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("delaywheel: gRPC address %q: %w", a, err)
		}
		g.conns = append(g.conns, conn)
		g.calls = append(g.calls, pb.NewDelaywheelClient(conn))
	}
	if len(g.conns) == 0 {
		return nil, fmt.Errorf("delaywheel: no gRPC address in %q", addrs)
	}
	return g, nil
}

// Close closes the client's connections.
func (g *GRPC) Close() error {
	var err error
	for _, c := range g.conns {
		err = errors.Join(err, c.Close())
	}
	return err
}

// invoke makes one call, at the node that answered last, moving on to the
// next node while a follower says it is not the leader of the whole call
// (see GRPC); it turns the answer into the API's type with conv and an
// error into an *Error. The raw answer is the JSON of answer's result (T itself when answer is nil):
// the body the HTTP API answers.
func invoke[R any, T any](ctx context.Context, g *GRPC, name string, call func(context.Context, pb.DelaywheelClient) (R, error), conv func(R) T, answer func(T) any) (T, error) {
	var zero T
	if g.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+g.token)
	}
	var err error
	for range len(g.calls) {
		i := g.cur.Load()
		var r R
		if r, err = call(ctx, g.calls[i]); err == nil {
			out := conv(r)
			if g.raw != nil {
				var body any = out
				if answer != nil {
					body = answer(out)
				}
				if b, jerr := json.Marshal(body); jerr == nil {
					g.raw(b)
				}
			}
			return out, nil
		}
		if !notLeader(err) || partial(err) {
			if unavailable(err) {
				g.moveOn(i) // for the next call; this one may have been done
			}
			break
		}
		g.moveOn(i)
	}
	if _, isStatus := status.FromError(err); isStatus {
		out := errorOfStatus(err)
		if e, ok := out.(*Error); ok && (status.Code(err) == codes.Canceled || status.Code(err) == codes.DeadlineExceeded) {
			e.cause = ctx.Err() // for errors.Is, as the HTTP client's errors
		}
		return zero, out
	}
	return zero, fmt.Errorf("delaywheel: %s: %w", name, err)
}

// next moves the client on from the node that answered last to the next.
func (g *GRPC) next() { g.moveOn(g.cur.Load()) }

// moveOn moves the client on from node i, unless another call did.
func (g *GRPC) moveOn(i int64) { g.cur.CompareAndSwap(i, (i+1)%int64(len(g.calls))) }

// notLeader reports whether err is a follower's refusal of a leader's call.
func notLeader(err error) bool {
	st, _ := status.FromError(err)
	if st.Code() != codes.Unavailable {
		return false
	}
	info := errorInfoOf(st)
	return info != nil && info.Reason == "NOT_LEADER"
}

// unavailable reports whether err is UNAVAILABLE but for NOT_LEADER: a
// node that cannot be reached or says to try another, which the client
// moves on from; not a part of a split call (partial), which another node
// would answer no better.
func unavailable(err error) bool {
	return status.Code(err) == codes.Unavailable && !notLeader(err)
}

// partial reports whether err is the answer to one group's part of a
// call split over many groups, whose ErrorInfo names the group (metadata
// "group"): the other parts may be done.
func partial(err error) bool {
	st, _ := status.FromError(err)
	info := errorInfoOf(st)
	return info != nil && info.GetMetadata()["group"] != ""
}

func errorInfoOf(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

// errorOfStatus turns a gRPC error into an *Error: the HTTP status the API
// gives the same answer, the HTTP API's code (from the ErrorInfo), the
// message and the retry delay. An error the server did not make (the
// connection) keeps its code's name.
func errorOfStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Status: api.HTTPStatus(st.Code()), Message: st.Message()}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			e.Code = d.Reason
			if d.Reason == "NOT_LEADER" {
				e.Code = api.CodeUnavailable
			}
		case *errdetails.RetryInfo:
			e.RetryAfter = d.GetRetryDelay().AsDuration()
		}
	}
	if e.Code == "" {
		e.Code = strings.ToLower(st.Code().String())
	}
	if st.Code() == codes.ResourceExhausted && e.Code != api.CodeOverloaded {
		// RESOURCE_EXHAUSTED is 429 overloaded, which may be retried, or
		// 413: too_large, or gRPC's own refusal of a message over its size.
		e.Status = http.StatusRequestEntityTooLarge
	}
	return e
}
