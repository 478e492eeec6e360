# beaneater against a delaywheel node's beanstalkd port: put with a delay,
# reserve, release, bury, kick and delete. Usage: ruby beaneater.rb host:port
require 'beaneater'

def check(ok, what)
  return if ok
  warn "FAIL: #{what}"
  exit 1
end

b = Beaneater.new(ARGV[0])
tube = b.tubes['ruby-jobs']
b.tubes.watch!('ruby-jobs')

put = Time.now
job = tube.put('hello from ruby', pri: 10, delay: 1, ttr: 30)
id = job[:id].to_i
begin
  b.tubes.reserve(0)
  check(Time.now - put >= 1, 'a job delayed 1 s is reserved at once')
rescue Beaneater::TimedOutError
end
got = b.tubes.reserve(10)
check(got.id.to_i == id, 'reserve after the delay')
check(Time.now - put >= 0.999, 'reserved before its delay')
check(got.body == 'hello from ruby', 'the body')
check(got.stats.state == 'reserved', 'stats-job state')

got.release(delay: 0)
got = b.tubes.reserve(10)
check(got.id.to_i == id, 'reserve after release')
got.touch
got.bury
buried = tube.peek(:buried)
check(!buried.nil? && buried.id.to_i == id, 'peek-buried')
check(tube.kick(10)[:id].to_i == 1, 'kick')
got = b.tubes.reserve(10)
check(got.id.to_i == id, 'reserve after kick')
got.delete
begin
  b.tubes.reserve(0)
  check(false, 'the tube is empty')
rescue Beaneater::TimedOutError
end
check(b.stats.max_job_size.to_i > 0, 'stats max-job-size')
b.close
puts 'ok'
