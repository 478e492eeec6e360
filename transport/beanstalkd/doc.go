// Package beanstalkd serves beanstalkd's text protocol over a delaywheel
// node, so that an existing beanstalkd client (Pheanstalk, beaneater,
// greenstalk, go-beanstalk…) becomes a client of a replicated queue.
//
// It owns the command parser (command.go), the mapping of message ids to
// beanstalkd's 64-bit job ids (jobid.go), the per-connection loop and its
// replies (server.go, conn.go, reserve.go, peek.go for peeks and kicks),
// the batching of pipelined puts (put.go), of the reserves waiting on a
// tube (coalesce.go) and of the deletes in flight (ack.go), and the YAML
// stats (stats.go). It reaches
// the node through the small Backend interface defined here, with plain
// wheel types: a tube is a topic, pri a priority, ttr the lease, delete an
// ack (reserved) or a cancel (delayed, ready, buried), release a nack, bury
// a dead letter and kick a redrive (of a tube without buried jobs, its
// delayed jobs made due now). README.md, the users' page, says what
// differs from beanstalkd; TestAnswersAsBeanstalkd holds the rest to the
// beanstalkd installed, where there is one.
package beanstalkd
