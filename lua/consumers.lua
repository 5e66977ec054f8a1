-- consumers: the workers and SQS clients seen receiving from a queue, newest first.
--
-- KEYS[1] meta (hash): the queue's settings (read: does the queue exist)
-- KEYS[2] consumers (hash): consumer id -> "<kind>|<JSON info>"
-- KEYS[3] consumers_at (zset): consumer ids scored by their last heartbeat (ms)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): the time returned
-- ARGV[2] limit (1-100): consumers to read, the most recent heartbeats first
--
-- Reads only. An id whose entry is gone is left out, so a reply may hold
-- fewer than limit consumers.
--
-- Returns {OK, now_ms, [id, last_ms, entry] * n}, the newest heartbeat first;
-- or {E_QUEUE_MISSING | E_BAD_ARGUMENT | E_LAYOUT, detail}.
local meta = KEYS[1]
local consumers = KEYS[2]
local consumers_at = KEYS[3]
local limit = int_arg(ARGV[2], 1, 100)

local now = clock(ARGV[1])
if now == nil or limit == nil then
  return fail(E_BAD_ARGUMENT, 'limit must be 1-100 and now_ms a number of ms, or empty')
end
local layout = redis.call('HGET', meta, 'layout')
if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end

-- The newest are last, in ascending order: read them back to front.
local flat = redis.call('ZRANGE', consumers_at, -limit, -1, 'WITHSCORES')
local n = #flat / 2
local ids = {}
local scores = {}
for i = 1, n do
  ids[i] = flat[#flat - 2 * i + 1]
  scores[i] = flat[#flat - 2 * i + 2]
end
local reply = {OK, now}
if n == 0 then
  return reply
end
local entries = redis.call('HMGET', consumers, unpack(ids))
for i = 1, n do
  if entries[i] then
    reply[#reply + 1] = ids[i]
    reply[#reply + 1] = tonumber(scores[i])
    reply[#reply + 1] = entries[i]
  end
end
return reply
