-- purge: delete every message of a queue; settings and counters stay.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): ids of visible messages
-- KEYS[3] inflight (zset): ids in flight, scored by visibility expiry (ms)
-- KEYS[4] delayed (zset): ids of delayed messages, scored by due time (ms)
-- KEYS[5] messages (hash): id -> record
-- KEYS[6] state (hash): id -> receive state
-- KEYS[7] origins (hash): id -> queue a moved message came from
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): unused, kept for uniformity
--
-- Returns {OK, number of messages purged} or {E_QUEUE_MISSING, ''}.
-- Messages already leaving through the outbox finish their move.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local delayed = KEYS[4]
local messages = KEYS[5]
local state = KEYS[6]
local origins = KEYS[7]

if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
local purged = redis.call('HLEN', messages)
redis.call('UNLINK', visible, inflight, delayed, messages, state, origins)
redis.call('HSET', meta, 'ghosts', 0)
return {OK, purged}
