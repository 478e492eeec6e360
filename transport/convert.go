package transport

import (
	"github.com/delaywheel/delaywheel/transport/api"
	"github.com/delaywheel/delaywheel/wheel"
)

// Conversions from the domain types to the wire types. Lists are never nil,
// so that they encode as [] rather than null.

func resultsOf(es []wheel.Enqueued) []api.Result {
	out := make([]api.Result, len(es))
	for i, e := range es {
		out[i] = api.Result{ID: e.ID.String(), DeliverAtMs: e.DeliverAtMs, Duplicate: e.Duplicate}
	}
	return out
}

func headersOf(h map[string]string) map[string]string {
	if h == nil {
		return map[string]string{}
	}
	return h
}

func viewOf(v wheel.View) api.MessageView {
	return api.MessageView{
		ID:          v.ID.String(),
		Topic:       v.Topic,
		State:       v.State.String(),
		DeliverAtMs: v.DeliverAtMs,
		EnqueuedMs:  v.EnqueuedMs,
		Attempts:    v.Attempts,
		Key:         v.Key,
		Priority:    v.Priority,
		Headers:     headersOf(v.Headers),
		Payload:     api.PayloadOf(v.Body),
	}
}

func viewsOf(vs []wheel.View) []api.MessageView {
	out := make([]api.MessageView, len(vs))
	for i, v := range vs {
		out[i] = viewOf(v)
	}
	return out
}

func topicsOf(ts []wheel.TopicCounts) []api.TopicCounts {
	out := make([]api.TopicCounts, len(ts))
	for i, t := range ts {
		out[i] = api.TopicCounts{Topic: t.Topic, Delayed: t.Delayed, Ready: t.Ready, Reserved: t.Reserved, Dead: t.Dead}
	}
	return out
}

func slotSummaryOf(s wheel.SlotSummary) api.SlotSummary {
	return api.SlotSummary{Slot: s.Slot, Second: s.Second, Messages: s.Messages, Bytes: s.Bytes}
}

// WheelView converts a wheel description to its wire form (GET /v1/wheel).
// The admin command uses it for data directories read offline.
func WheelView(w wheel.Info) api.Wheel {
	out := api.Wheel{
		Slots:            wheel.Slots,
		TickMs:           wheel.TickMs,
		CursorMs:         w.CursorMs,
		HorizonMs:        w.HorizonMs,
		OpenSegments:     w.OpenSegments,
		OverflowMessages: w.OverflowMessages,
		NonEmpty:         make([]api.SlotSummary, len(w.NonEmpty)),
	}
	for i, s := range w.NonEmpty {
		out.NonEmpty[i] = slotSummaryOf(s)
	}
	return out
}

// SlotView converts a slot description to its wire form
// (GET /v1/wheel/slots/{slot}). Records are listed only when records is set.
func SlotView(s wheel.SlotInfo, records bool) api.Slot {
	sum := slotSummaryOf(s.SlotSummary)
	out := api.Slot{Slot: sum.Slot, Second: sum.Second, File: s.File, Messages: sum.Messages, Bytes: sum.Bytes}
	if !records {
		return out
	}
	out.Records = make([]api.SlotRecord, len(s.Records))
	for i, r := range s.Records {
		out.Records[i] = api.SlotRecord{Offset: r.Offset, Type: r.Type, Index: r.Index, ID: r.ID.String(), Topic: r.Topic,
			DueMs: r.DueMs, Attempts: r.Attempts, Bytes: r.Bytes, Live: r.Live}
	}
	return out
}
