-- purge: delete every message of a queue; settings and counters stay.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): visible messages, ids or "<id>|<record>"
-- KEYS[3] inflight (zset): ids in flight, scored by visibility expiry (ms)
-- KEYS[4] delayed (zset): ids of delayed messages, scored by due time (ms)
-- KEYS[5] messages (hash): id -> record
-- KEYS[6] state (hash): id -> receive state
-- KEYS[7] origins (hash): id -> queue a moved message came from
-- KEYS[8] fifo (hash): FIFO queues: id -> "<group> <seq> <sent_ms>"
-- KEYS[9] ordered (zset): FIFO queues: each group's messages in order
-- KEYS[10] groups (hash): FIFO queues: group -> 'r' | 'w' | messages in flight
-- KEYS[11] ready (list): FIFO queues: groups whose head may be received
-- KEYS[12] waiting (zset): FIFO queues: groups whose head is delayed
-- KEYS[13] attempts (hash): FIFO queues: receive request attempt id -> messages
-- KEYS[14] attempts_at (zset): FIFO queues: attempt ids by when they lapse
-- KEYS[15] dedup (hash): deduplication key -> the message it let in
-- KEYS[16] dedup_at (zset): deduplication keys by when they lapse
-- KEYS[17] tenants (hash): fair queues: group -> its messages in flight
-- KEYS[18] group_of (hash): fair queues: id -> group, of grouped messages in flight
-- KEYS[19] deferred (zset): fair queues: noisy groups' messages set aside
-- KEYS[20] noisy (zset): fair queues: groups with messages set aside
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] interval_ms (0-86400000): refuse if the last purge was less than this ago
--
-- Returns {OK, number of messages purged}, {E_PURGE_IN_PROGRESS, ms since the
-- last purge} or {E_QUEUE_MISSING, ''}.
-- As on SQS, the deduplication window goes too: a message sent again after a
-- purge with an id seen before is stored.
-- Messages already leaving through the outbox finish their move.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local delayed = KEYS[4]
local messages = KEYS[5]
local state = KEYS[6]
local origins = KEYS[7]
local fifo = KEYS[8]
local ordered = KEYS[9]
local groups = KEYS[10]
local ready = KEYS[11]
local waiting = KEYS[12]
local attempts = KEYS[13]
local attempts_at = KEYS[14]
local dedup = KEYS[15]
local dedup_at = KEYS[16]
local tenants = KEYS[17]
local group_of = KEYS[18]
local deferred = KEYS[19]
local noisy = KEYS[20]
local now = clock(ARGV[1])
local interval_ms = int_arg(ARGV[2], 0, 86400000)

if interval_ms == nil then
  return fail(E_BAD_ARGUMENT, 'bad interval_ms')
end
local last = redis.call('HMGET', meta, 'vis_ms', 'purged_ms', 'layout', 'ghosts', 'fifo')
if last[1] == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(last[3]) then
  return fail(E_LAYOUT, last[3])
end
local since = now - (tonumber(last[2]) or 0)
if interval_ms > 0 and since < interval_ms then
  return fail(E_PURGE_IN_PROGRESS, since)
end
local purged = redis.call('HLEN', messages)
if takes_inline(last[3]) and last[5] ~= '1' then
  -- Messages never received are in the list only: count every message by where it is.
  purged = redis.call('LLEN', visible) - (tonumber(last[4]) or 0) + redis.call('ZCARD', inflight)
    + redis.call('ZCARD', delayed)
    + redis.call('ZCARD', deferred)
end
redis.call('UNLINK', visible, inflight, delayed, messages, state, origins, fifo, ordered, groups,
  ready, waiting, attempts, attempts_at, dedup, dedup_at, tenants, group_of, deferred, noisy)
redis.call('HSET', meta, 'ghosts', 0, 'purged_ms', now)
return {OK, purged}
