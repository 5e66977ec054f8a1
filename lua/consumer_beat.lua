-- consumer_beat: record (or forget) one consumer's heartbeat on a queue.
--
-- KEYS[1] meta (hash): the queue's settings (read: does the queue exist)
-- KEYS[2] consumers (hash): consumer id -> "<kind>|<JSON info>"
-- KEYS[3] consumers_at (zset): consumer ids scored by their last heartbeat (ms)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] consumer id (1-200 bytes): a worker's "<host>:<pid>:<random>", an SQS
--         client's "sqs:<key id>:<agent>:<address>"
-- ARGV[3] kind ('worker' or 'sqs')
-- ARGV[4] info (JSON text, at most 2048 bytes): stored as given, not parsed
-- ARGV[5] forget ('0' or '1'): 1 removes this consumer (a graceful stop)
--
-- A queue that does not exist is refused before any write, so a beat that
-- comes after the queue's deletion recreates none of its keys. Bounded work
-- per call: besides its own entry, drops at most STALE_DROPS entries whose
-- heartbeat is older than STALE_MS, and at most STALE_DROPS of the oldest
-- while more than MAX_CONSUMERS are kept (a beat adds one at most).
--
-- Returns {OK}, or {E_QUEUE_MISSING | E_BAD_ARGUMENT | E_LAYOUT, detail}.
local meta = KEYS[1]
local consumers = KEYS[2]
local consumers_at = KEYS[3]
local id = ARGV[2]
local kind = ARGV[3]
local info = ARGV[4]
local forget = ARGV[5]

-- An hour without a heartbeat: the consumer is gone (workers beat every 15 s).
local STALE_MS = 3600000
local STALE_DROPS = 10
local MAX_CONSUMERS = 1000

local now = clock(ARGV[1])
if now == nil then
  return fail(E_BAD_ARGUMENT, 'now_ms must be a number of ms, or empty')
end
if #id < 1 or #id > 200 then
  return fail(E_BAD_ARGUMENT, 'a consumer id is 1-200 bytes')
end
if kind ~= 'worker' and kind ~= 'sqs' then
  return fail(E_BAD_ARGUMENT, "kind must be 'worker' or 'sqs'")
end
if #info > 2048 then
  return fail(E_BAD_ARGUMENT, 'info is at most 2048 bytes')
end
if forget ~= '0' and forget ~= '1' then
  return fail(E_BAD_ARGUMENT, "forget must be '0' or '1'")
end
local layout = redis.call('HGET', meta, 'layout')
if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end

if forget == '1' then
  redis.call('HDEL', consumers, id)
  redis.call('ZREM', consumers_at, id)
else
  redis.call('HSET', consumers, id, kind .. '|' .. info)
  redis.call('ZADD', consumers_at, now, id)
end

local stale = redis.call('ZRANGEBYSCORE', consumers_at, '-inf', '(' .. (now - STALE_MS), 'LIMIT', 0, STALE_DROPS)
if #stale > 0 then
  redis.call('ZREM', consumers_at, unpack(stale))
  redis.call('HDEL', consumers, unpack(stale))
end
local over = math.min(redis.call('ZCARD', consumers_at) - MAX_CONSUMERS, STALE_DROPS)
if over > 0 then
  local oldest = redis.call('ZRANGE', consumers_at, 0, over - 1)
  redis.call('ZREM', consumers_at, unpack(oldest))
  redis.call('HDEL', consumers, unpack(oldest))
end
return {OK}
