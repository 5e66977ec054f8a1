-- move_claim: recovery of moves interrupted between their steps: claim up
-- to 100 outbox entries whose move began at least min_age_ms ago.
--
-- KEYS[1] outbox (hash): id -> message leaving for another queue
-- KEYS[2] outbox_at (zset): outbox ids scored by when their move began (ms)
-- KEYS[3] meta (hash): the queue's settings (read: its data layout)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] min_age_ms (0-86400000): entries younger than this are left alone
-- ARGV[3] max_entries (1-100)
--
-- Claimed entries are stamped with now, so two recoveries running at once
-- do not both take them up. Returns {OK, [id, outbox_entry] * n}.
local outbox = KEYS[1]
local outbox_at = KEYS[2]
local meta = KEYS[3]
local now = clock(ARGV[1])
local min_age_ms = int_arg(ARGV[2], 0, 86400000)
local max_entries = int_arg(ARGV[3], 1, 100)

if min_age_ms == nil or max_entries == nil then
  return fail(E_BAD_ARGUMENT, 'bad min_age_ms or max_entries')
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local ids = redis.call('ZRANGEBYSCORE', outbox_at, '-inf', now - min_age_ms, 'LIMIT', 0, max_entries)
local reply = {OK}
if #ids == 0 then
  return reply
end
local entries = redis.call('HMGET', outbox, unpack(ids))
for i = 1, #ids do
  if entries[i] then
    redis.call('ZADD', outbox_at, now, ids[i])
    reply[#reply + 1] = ids[i]
    reply[#reply + 1] = entries[i]
  else
    redis.call('ZREM', outbox_at, ids[i])
  end
end
return reply
