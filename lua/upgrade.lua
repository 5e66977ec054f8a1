-- upgrade: move a queue's data forward to the newest layout these scripts know.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping (its 'layout' field)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): unused, kept for uniformity
-- ARGV[2] dry_run ('1': report only, change nothing; '': upgrade)
--
-- Layout 1 is the one 0.2.0 writes, which records no layout field: such a
-- queue is stamped 1, which changes no data. A later layout converts the
-- queue's data here, a bounded number of entries a call, and answers
-- done = 0 until it is through (every script of that version reads both
-- layouts meanwhile, so a queue stays in use while it moves).
--
-- Returns {OK, stored ('' when the queue records none), layout after, done (0|1)}
-- or {E_QUEUE_MISSING | E_LAYOUT, detail}.
local meta = KEYS[1]
local dry_run = ARGV[2] == '1'

local stored = redis.call('HMGET', meta, 'created_ms', 'layout')
if stored[1] == false and redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
local layout = stored[2]
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
if layout == false then
  if dry_run then
    return {OK, '', 1, 0}
  end
  redis.call('HSET', meta, 'layout', LAYOUT)
  return {OK, '', LAYOUT, 1}
end
return {OK, layout, LAYOUT, 1}
