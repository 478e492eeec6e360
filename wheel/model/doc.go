// Package model holds the vocabulary every layer of delaywheel speaks and
// that carries no machinery: message ids and receipts, the hashing of a
// topic to its group, a message and its delivery, a cluster member, the
// consumer a push transport reads, and the errors the serving layers map to
// status codes. The engine (package wheel), replication and the front ends
// all import it; it imports none of them, so a front end can name an error
// or a member without importing the engine.
package model
