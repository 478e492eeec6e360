package command

import (
	"errors"
	"fmt"

	"github.com/delaywheel/delaywheel/wheel/model"
)

// entryVersion prefixes every encoded log entry.
const entryVersion = 1

// ErrCorruptCommand means a log entry could not be decoded.
var ErrCorruptCommand = errors.New("corrupt command")

// encodedSize estimates the encoding of cmds, so that a large Schedule is
// encoded into one allocation.
func encodedSize(cmds []Command) int {
	n := 256
	for _, c := range cmds {
		if s, ok := c.(Schedule); ok {
			for i := range s.Messages {
				m := &s.Messages[i]
				n += 48 + len(m.Topic) + len(m.Key) + len(m.Body)
				for k, v := range m.Headers {
					n += 4 + len(k) + len(v)
				}
			}
		}
	}
	return n
}

// EncodeCommands encodes a list of commands as one log entry.
func EncodeCommands(cmds []Command) []byte {
	e := &Encoder{B: make([]byte, 0, encodedSize(cmds))}
	e.B = append(e.B, entryVersion)
	e.Uvarint(uint64(len(cmds)))
	for _, c := range cmds {
		e.B = append(e.B, byte(c.Kind()))
		switch c := c.(type) {
		case Schedule:
			e.Varint(c.NowMs)
			e.Uvarint(uint64(len(c.Messages)))
			for i := range c.Messages {
				m := &c.Messages[i]
				e.Message(m.Topic, m.Key, m.Body, m.Headers, m.Priority, m.DeliverAtMs, m.TTRMs, m.MaxAttempts)
			}
		case Cancel:
			e.ID(c.ID)
			e.Str(c.Topic)
			e.Str(c.Key)
		case Reschedule:
			e.ID(c.ID)
			e.Varint(c.DeliverAtMs)
		case Lease:
			e.Varint(c.NowMs)
			e.Uvarint(uint64(len(c.Items)))
			for _, it := range c.Items {
				e.leaseItem(it)
			}
		case LeaseBuried:
			e.Varint(c.NowMs)
			e.Str(c.Topic)
			e.leaseItem(c.Item)
		case Ack, Touch, Bury, DeadLetter:
			nowMs, rs := c.(settlement).settles()
			e.Varint(nowMs)
			e.Receipts(rs)
		case Nack:
			e.Varint(c.NowMs)
			e.Varint(c.DelayMs)
			e.Receipts(c.Receipts)
		case Expire:
			e.Varint(c.Before)
		case Promote:
			e.Varint(c.Before)
		case Redrive:
			e.Varint(c.NowMs)
			e.Str(c.Topic)
			e.Uvarint(uint64(len(c.IDs)))
			for _, id := range c.IDs {
				e.ID(id)
			}
		case SetNode:
			e.Str(c.Node.ID)
			e.Str(c.Node.RaftAddr)
			e.Str(c.Node.HTTPAddr)
			if c.Node.GRPCAddr != "" {
				e.Str(c.Node.GRPCAddr)
			}
		case RemoveNode:
			e.Str(c.ID)
		case SetWebhook:
			e.Webhook(c.Webhook)
		case DeleteWebhook:
			e.Str(c.Topic)
		case SetSchedule:
			e.Varint(c.NowMs)
			e.ScheduleSpec(&c.Spec)
		case DeleteSchedule:
			e.Str(c.Name)
		case AdvanceSchedules:
			e.Varint(c.NowMs)
			e.Varint(c.SinceMs)
			e.AdvanceItems(c.Items)
		default:
			panic(fmt.Sprintf("wheel: encode unknown command %T", c))
		}
	}
	return e.B
}

// DecodeCommands decodes a log entry written by EncodeCommands. A
// Schedule's message bodies alias b: b must not change while the commands
// are in use.
func DecodeCommands(b []byte) ([]Command, error) {
	d := &Decoder{B: b}
	if v := d.Byte(); d.Err == nil && v != entryVersion {
		return nil, fmt.Errorf("%w: entry version %d", ErrCorruptCommand, v)
	}
	n := d.Count(1)
	cmds := make([]Command, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		switch k := Kind(d.Byte()); k {
		case KindSchedule:
			c := Schedule{NowMs: d.Varint()}
			m := d.Count(4)
			c.Messages = make([]NewMessage, m)
			// The bodies alias the entry: applying it copies each body into
			// a slot file or the index, and whatever outlives the apply
			// (a placed message's event) takes its own copy, so no body pins
			// the entry.
			for j := 0; j < m && d.Err == nil; j++ {
				c.Messages[j] = d.Message(nil, true)
			}
			cmds = append(cmds, c)
		case KindCancel:
			cmds = append(cmds, Cancel{ID: d.ID(), Topic: d.Str(), Key: d.Str()})
		case KindReschedule:
			cmds = append(cmds, Reschedule{ID: d.ID(), DeliverAtMs: d.Varint()})
		case KindLease:
			c := Lease{NowMs: d.Varint()}
			m := d.Count(model.IDLen + 8 + 2)
			c.Items = make([]LeaseItem, m)
			for j := 0; j < m && d.Err == nil; j++ {
				c.Items[j] = d.leaseItem()
			}
			cmds = append(cmds, c)
		case KindLeaseBuried:
			cmds = append(cmds, LeaseBuried{NowMs: d.Varint(), Topic: d.Str(), Item: d.leaseItem()})
		case KindAck:
			cmds = append(cmds, Ack{NowMs: d.Varint(), Receipts: d.Receipts()})
		case KindNack:
			cmds = append(cmds, Nack{NowMs: d.Varint(), DelayMs: d.Varint(), Receipts: d.Receipts()})
		case KindTouch:
			cmds = append(cmds, Touch{NowMs: d.Varint(), Receipts: d.Receipts()})
		case KindBury:
			cmds = append(cmds, Bury{NowMs: d.Varint(), Receipts: d.Receipts()})
		case KindDeadLetter:
			cmds = append(cmds, DeadLetter{NowMs: d.Varint(), Receipts: d.Receipts()})
		case KindExpire:
			cmds = append(cmds, Expire{Before: d.Varint()})
		case KindPromote:
			cmds = append(cmds, Promote{Before: d.Varint()})
		case KindRedrive:
			c := Redrive{NowMs: d.Varint(), Topic: d.Str()}
			m := d.Count(model.IDLen)
			for j := 0; j < m && d.Err == nil; j++ {
				c.IDs = append(c.IDs, d.ID())
			}
			cmds = append(cmds, c)
		case KindSetNode:
			cmds = append(cmds, SetNode{Node: model.Member{ID: d.Str(), RaftAddr: d.Str(), HTTPAddr: d.Str()}})
		case KindSetNodeGRPC:
			cmds = append(cmds, SetNode{Node: model.Member{ID: d.Str(), RaftAddr: d.Str(), HTTPAddr: d.Str(), GRPCAddr: d.Str()}})
		case KindRemoveNode:
			cmds = append(cmds, RemoveNode{ID: d.Str()})
		case KindSetWebhook:
			cmds = append(cmds, SetWebhook{Webhook: d.Webhook()})
		case KindDeleteWebhook:
			cmds = append(cmds, DeleteWebhook{Topic: d.Str()})
		case KindSetSchedule:
			cmds = append(cmds, SetSchedule{NowMs: d.Varint(), Spec: d.ScheduleSpec()})
		case KindDeleteSchedule:
			cmds = append(cmds, DeleteSchedule{Name: d.Str()})
		case KindAdvanceSchedules:
			cmds = append(cmds, AdvanceSchedules{NowMs: d.Varint(), SinceMs: d.Varint(), Items: d.AdvanceItems()})
		default:
			if d.Err == nil {
				d.Err = fmt.Errorf("%w: unknown command kind %d", ErrCorruptCommand, k)
			}
		}
	}
	if d.Err == nil && len(d.B) != 0 {
		d.Err = fmt.Errorf("%w: %d trailing bytes", ErrCorruptCommand, len(d.B))
	}
	if d.Err != nil {
		return nil, d.Err
	}
	return cmds, nil
}

// leaseItem encodes one item of a Lease or LeaseBuried.
func (e *Encoder) leaseItem(it LeaseItem) {
	e.ID(it.ID)
	e.U64(it.Nonce)
	e.Varint(it.ExpiresMs)
	e.Varint(it.RedeliverMs)
}

// leaseItem decodes what Encoder.leaseItem wrote.
func (d *Decoder) leaseItem() LeaseItem {
	return LeaseItem{ID: d.ID(), Nonce: d.U64(), ExpiresMs: d.Varint(), RedeliverMs: d.Varint()}
}
