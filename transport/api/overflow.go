package api

// OverflowBucket counts the overflow messages due in
// [start_ms, start_ms + bucket_ms).
type OverflowBucket struct {
	StartMs  int64 `json:"start_ms"`
	Messages int64 `json:"messages"`
}

// Overflow answers GET /v1/wheel/overflow: the messages due beyond the
// horizon, grouped by due time. Buckets lists the non-empty buckets in
// order, at most limit of them; Beyond counts the messages of the buckets
// after the last one listed.
type Overflow struct {
	BucketMs int64            `json:"bucket_ms"`
	Total    int64            `json:"total"`
	Buckets  []OverflowBucket `json:"buckets"`
	Beyond   int64            `json:"beyond"`
}
