package api

import (
	"net/http"

	"google.golang.org/grpc/codes"
)

// statusCodes pairs each HTTP status of the API with the gRPC code of the
// same answer. 413 and 429 are both RESOURCE_EXHAUSTED; the gRPC answer
// tells them apart by its ErrorInfo reason (the API code) and a 429's
// RetryInfo. The first pair of a code is the status it maps back to.
var statusCodes = []struct {
	status int
	code   codes.Code
}{
	{http.StatusBadRequest, codes.InvalidArgument},
	{http.StatusUnauthorized, codes.Unauthenticated},
	{http.StatusNotFound, codes.NotFound},
	{http.StatusConflict, codes.FailedPrecondition},
	{http.StatusTooManyRequests, codes.ResourceExhausted},
	{http.StatusRequestEntityTooLarge, codes.ResourceExhausted},
	{http.StatusServiceUnavailable, codes.Unavailable},
	{http.StatusInternalServerError, codes.Internal},
}

// GRPCCode is the gRPC code of the answer the HTTP API gives with status;
// INTERNAL for a status the API does not use.
func GRPCCode(status int) codes.Code {
	for _, p := range statusCodes {
		if p.status == status {
			return p.code
		}
	}
	return codes.Internal
}

// HTTPStatus is the HTTP status of the answer the gRPC API gives with
// code; a code the server does not send (a client-side deadline, a lost
// connection) maps to 503 when it is worth retrying, else 500.
func HTTPStatus(code codes.Code) int {
	for _, p := range statusCodes {
		if p.code == code {
			return p.status
		}
	}
	if code == codes.DeadlineExceeded || code == codes.Canceled {
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
