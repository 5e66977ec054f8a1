-- move_task_update: a runner claims a message move task (or renews its
-- lease), records its progress, and ends it.
--
-- KEYS[1] tasks (hash): token -> task record (see common.lua), 'active' ->
--         token of the running or cancelling task
-- KEYS[2] meta (hash): the queue's settings (read: its data layout)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] token (string): the task
-- ARGV[3] owner (1-100 characters, no '|'): the runner
-- ARGV[4] lease_ms (1000-3600000): how long the claim holds without renewal
-- ARGV[5] moved_delta (0-1000000000): messages stored in their destination since the last update
-- ARGV[6] processed_delta (0-1000000000): messages taken from the source since the last update
-- ARGV[7] pause_ms (0-3600000): the next chunk waits this long from now (rate limit)
-- ARGV[8] outcome ('', 'COMPLETED' or 'FAILED'): '' keeps the task running
-- ARGV[9] reason (string): the failure reason, with outcome FAILED
--
-- Counts are added whoever holds the task (they happened). The claim goes
-- to this runner when nobody holds the task, this runner does, or the
-- holder's lease ran out. A claimed CANCELLING task becomes CANCELLED. An
-- ended task frees its source for a new one.
-- Returns {OK, claimed (0|1), now_ms, record} or {E_TASK_MISSING | E_BAD_ARGUMENT, detail}.
local tasks = KEYS[1]
local meta = KEYS[2]
local now = clock(ARGV[1])
local token = ARGV[2]
local owner = ARGV[3]
local lease_ms = int_arg(ARGV[4], 1000, 3600000)
local moved_delta = int_arg(ARGV[5], 0, 1000000000)
local processed_delta = int_arg(ARGV[6], 0, 1000000000)
local pause_ms = int_arg(ARGV[7], 0, 3600000)
local outcome = ARGV[8]
local reason = ARGV[9]

if lease_ms == nil or moved_delta == nil or processed_delta == nil or pause_ms == nil or
   reason == nil or #owner < 1 or #owner > 100 or string.find(owner, '|', 1, true) or
   (outcome ~= '' and outcome ~= 'COMPLETED' and outcome ~= 'FAILED') then
  return fail(E_BAD_ARGUMENT, 'bad owner, lease, counts, pause or outcome')
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local record = redis.call('HGET', tasks, token)
local task = record and parse_task(record)
if not task then
  return fail(E_TASK_MISSING, token)
end
task.moved = task.moved + moved_delta
task.processed = task.processed + processed_delta
local claimed = 0
if task_is_active(task) and (task.owner == '' or task.owner == owner or task.lease <= now) then
  claimed = 1
  if outcome ~= '' then
    task.status = outcome
    if outcome == 'FAILED' then
      task.reason = reason
    end
  elseif task.status == 'CANCELLING' then
    task.status = 'CANCELLED'
  end
  if task.status == 'RUNNING' then
    task.owner = owner
    task.lease = now + lease_ms
    -- A claim (pause 0) keeps the pause the last chunk asked for.
    task.next_ms = math.max(task.next_ms, now + pause_ms)
  else
    task.owner = ''
    task.lease = 0
    task.next_ms = 0
    if redis.call('HGET', tasks, 'active') == token then
      redis.call('HDEL', tasks, 'active')
    end
  end
end
record = format_task(task)
redis.call('HSET', tasks, token, record)
return {OK, claimed, now, record}
