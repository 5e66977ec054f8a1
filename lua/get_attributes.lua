-- get_attributes: a queue's settings, exact message counts and counters.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): ids of visible messages
-- KEYS[3] inflight (zset): ids in flight, scored by visibility expiry (ms)
-- KEYS[4] delayed (zset): ids of delayed messages, scored by due time (ms)
-- KEYS[5] messages (hash): id -> record "<sent_ms>|<payload>"
-- KEYS[6] stats (hash): counters
-- KEYS[7] outbox (hash): id -> message leaving for another queue
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
--
-- Messages whose timeout or delay has run out but that no receive has
-- moved yet are counted where they now belong (visible).
--
-- Returns {OK, now_ms, meta (flat field, value list), stats (flat list),
--          visible, in_flight, delayed, moving, oldest_sent_ms (-1: none)}
-- or {E_QUEUE_MISSING, ''}.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local delayed = KEYS[4]
local messages = KEYS[5]
local stats = KEYS[6]
local outbox = KEYS[7]
local now = clock(ARGV[1])

local OLDEST_PROBE = 10

local settings = redis.call('HGETALL', meta)
if #settings == 0 then
  return fail(E_QUEUE_MISSING)
end
local ghosts = tonumber(redis.call('HGET', meta, 'ghosts')) or 0
local expired = redis.call('ZCOUNT', inflight, '-inf', now)
local due = redis.call('ZCOUNT', delayed, '-inf', now)
local visible_n = redis.call('LLEN', visible) - ghosts + expired + due
local inflight_n = redis.call('ZCARD', inflight) - expired
local delayed_n = redis.call('ZCARD', delayed) - due

-- The oldest message waiting: the head of the list holds the oldest
-- sends; run-out timeouts and delays may be older still.
local candidates = redis.call('LRANGE', visible, 0, OLDEST_PROBE - 1)
local first_expired = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, 1)
local first_due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, 1)
candidates[#candidates + 1] = first_expired[1]
candidates[#candidates + 1] = first_due[1]
local oldest = -1
if #candidates > 0 then
  local records = redis.call('HMGET', messages, unpack(candidates))
  for i = 1, #records do
    if records[i] then
      local sent = sent_ms_of(records[i])
      if oldest < 0 or sent < oldest then
        oldest = sent
      end
    end
  end
end

return {OK, now, settings, redis.call('HGETALL', stats), visible_n, inflight_n,
  delayed_n, redis.call('HLEN', outbox), oldest}
