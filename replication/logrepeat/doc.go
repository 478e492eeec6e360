// Package logrepeat owns the rate limit of repeated log lines: a line
// that repeats for one cause (a message and what it is about: a peer, a
// topic's header) is logged at most once per window, with the count of
// the repeats left out since it last was.
package logrepeat
