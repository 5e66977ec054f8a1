-- delete_queue: drop a queue and everything in it.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): ids of visible messages
-- KEYS[3] inflight (zset): ids in flight, scored by visibility expiry (ms)
-- KEYS[4] delayed (zset): ids of delayed messages, scored by due time (ms)
-- KEYS[5] messages (hash): id -> record
-- KEYS[6] state (hash): id -> receive state
-- KEYS[7] stats (hash): counters
-- KEYS[8] events (stream): lifecycle events
-- KEYS[9] outbox (hash): id -> message leaving for another queue
-- KEYS[10] outbox_at (zset): outbox ids scored by when their move began (ms)
-- KEYS[11] arrivals (zset): markers of moves already received (ms)
-- KEYS[12] origins (hash): id -> queue a moved message came from
-- KEYS[13] tags (hash): tag key -> value
-- KEYS[14] sources (zset): names of queues that may name this one as dead-letter queue
-- KEYS[15] tasks (hash): message move tasks of which this queue is the source
-- KEYS[16] fifo (hash): FIFO queues: id -> "<group> <seq> <sent_ms>"
-- KEYS[17] ordered (zset): FIFO queues: each group's messages in order
-- KEYS[18] groups (hash): FIFO queues: group -> 'r' | 'w' | messages in flight
-- KEYS[19] ready (list): FIFO queues: groups whose head may be received
-- KEYS[20] waiting (zset): FIFO queues: groups whose head is delayed
-- KEYS[21] dedup (hash): FIFO queues: deduplication key -> message it let in
-- KEYS[22] dedup_at (zset): FIFO queues: deduplication keys by when they lapse
-- KEYS[23] attempts (hash): FIFO queues: receive request attempt id -> messages
-- KEYS[24] attempts_at (zset): FIFO queues: attempt ids by when they lapse
-- KEYS[25] deleted (string): when the queue was deleted (ms), for 60 s
-- KEYS[26] tenants (hash): fair queues: group -> its messages in flight
-- KEYS[27] group_of (hash): fair queues: id -> group, of grouped messages in flight
-- KEYS[28] deferred (zset): fair queues: noisy groups' messages set aside
-- KEYS[29] noisy (zset): fair queues: groups with messages set aside
-- KEYS[30] history (list): samples of the queue's counts
-- KEYS[31] consumers (hash): workers and SQS clients seen receiving
-- KEYS[32] consumers_at (zset): consumer ids by their last heartbeat
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
--
-- Returns {OK, existed (0|1)}. UNLINK frees big collections off the main thread.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local delayed = KEYS[4]
local messages = KEYS[5]
local state = KEYS[6]
local stats = KEYS[7]
local events = KEYS[8]
local outbox = KEYS[9]
local outbox_at = KEYS[10]
local arrivals = KEYS[11]
local origins = KEYS[12]
local tags = KEYS[13]
local sources = KEYS[14]
local tasks = KEYS[15]

local fifo = KEYS[16]
local ordered = KEYS[17]
local groups = KEYS[18]
local ready = KEYS[19]
local waiting = KEYS[20]
local dedup = KEYS[21]
local dedup_at = KEYS[22]
local attempts = KEYS[23]
local attempts_at = KEYS[24]
local deleted = KEYS[25]
local tenants = KEYS[26]
local group_of = KEYS[27]
local deferred = KEYS[28]
local noisy = KEYS[29]
local history = KEYS[30]
local consumers = KEYS[31]
local consumers_at = KEYS[32]
local now = clock(ARGV[1])
local existed = redis.call('EXISTS', meta)
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
-- (a newer layout may keep keys this version does not know of: its own version deletes it)
redis.call('UNLINK', meta, visible, inflight, delayed, messages, state, stats,
  events, outbox, outbox_at, arrivals, origins, tags, sources, tasks, fifo, ordered, groups, ready, waiting,
  dedup, dedup_at, attempts, attempts_at, tenants, group_of, deferred, noisy, history, consumers,
  consumers_at)
if existed == 1 then
  -- For SQS's rule: no queue of this name for 60 s (create_queue enforces it on request).
  redis.call('SET', deleted, now, 'PX', DELETED_MS)
end
return {OK, existed}
