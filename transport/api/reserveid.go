package api

// ReserveByIDRequest is the body of POST /v1/messages/{id}/reserve; it
// may be empty.
type ReserveByIDRequest struct {
	TTRMs *int64 `json:"ttr_ms,omitempty"` // lease length; default the message's own
}
