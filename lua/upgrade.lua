-- upgrade: move a queue's data forward to the newest layout these scripts know.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping (its 'layout' field)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): unused, kept for uniformity
-- ARGV[2] dry_run ('1': report only, change nothing; '': upgrade)
--
-- Layout 1 is the one 0.2.0 writes, which records no layout field. Layout 2
-- only adds forms to layout 1's (inline records of messages never received,
-- first receives' state in their in-flight member: see includes/common.lua),
-- and its scripts read both, so moving a queue from 1 to 2 converts no data:
-- it stamps the layout, after which scripts write the new forms, and the old
-- entries leave as their messages are received and deleted. A later layout
-- that converts data does it here, a bounded number of entries a call,
-- answering done = 0 until it is through.
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
if (tonumber(layout) or 0) == LAYOUT then
  return {OK, layout, LAYOUT, 1}
end
if dry_run then
  return {OK, layout or '', LAYOUT, 0}
end
redis.call('HSET', meta, 'layout', LAYOUT)
return {OK, layout or '', LAYOUT, 1}
