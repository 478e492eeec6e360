<?php
// Pheanstalk against a delaywheel node's beanstalkd port: put with a
// delay, reserve, release, bury, kick and delete. Usage: php pheanstalk.php host port
require_once '/usr/share/php/Pheanstalk/autoload.php';

use Pheanstalk\Pheanstalk;

function check(bool $ok, string $what): void
{
    if (!$ok) {
        fwrite(STDERR, "FAIL: $what\n");
        exit(1);
    }
}

$p = Pheanstalk::create($argv[1], (int)$argv[2]);
$p->useTube('php-jobs');
$p->watch('php-jobs');
$p->ignore('default');

$put = microtime(true);
$job = $p->put('hello from php', 10, 1, 30);
check($p->reserveWithTimeout(0) === null || microtime(true) - $put >= 1, 'a job delayed 1 s is reserved at once');
$got = $p->reserveWithTimeout(10);
check($got !== null && $got->getId() === $job->getId(), 'reserve after the delay');
check(microtime(true) - $put >= 0.999, 'reserved before its delay');
check($got->getData() === 'hello from php', 'the body');
check($p->statsJob($got)['state'] === 'reserved', 'stats-job state');

$p->release($got, 10, 0);
$got = $p->reserveWithTimeout(10);
check($got !== null && $got->getId() === $job->getId(), 'reserve after release');
$p->touch($got);
$p->bury($got);
$buried = $p->peekBuried();
check($buried !== null && $buried->getId() === $job->getId(), 'peek-buried');
check($p->kick(10) === 1, 'kick');
$got = $p->reserveWithTimeout(10);
check($got !== null && $got->getId() === $job->getId(), 'reserve after kick');
$p->delete($got);
check($p->reserveWithTimeout(0) === null, 'the tube is empty');
check((int)$p->stats()['max-job-size'] > 0, 'stats max-job-size');
echo "ok\n";
