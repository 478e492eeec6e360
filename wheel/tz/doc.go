// Package tz owns the time-zone database the replicated state machine
// computes calendars with.
//
// A recurring schedule's next occurrence is computed while applying a log
// entry, so every replica must read the same zone rules. time.LoadLocation
// cannot promise that: it reads $ZONEINFO and the host's zoneinfo first,
// and the data embedded by time/tzdata only when those lack the zone, so
// two nodes on hosts with different tzdata releases would place a
// daylight-saving change differently and their stores would diverge.
// This package reads zones only from the zone database embedded in the
// binary (the Go distribution's lib/time/zoneinfo.zip, copied here by go
// generate): every node running one release computes the same calendar,
// whatever its host has. A release that changes the file changes zone
// rules for every node at once, like any change of the apply code.
package tz

//go:generate sh -c "cp \"$(go env GOROOT)/lib/time/zoneinfo.zip\" zoneinfo.zip"
