-- tag_queue: add tags to a queue or overwrite their values; at most 50 in all.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] tags (hash): tag key -> value
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): unused, kept for uniformity
-- ARGV[2..] key, value pairs (1 to 50 pairs, distinct keys)
--
-- The limit is checked before anything is written: a change that would
-- leave more than 50 tags changes nothing.
-- Returns {OK, tag_count} or {E_QUEUE_MISSING | E_TAG_LIMIT | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local tags = KEYS[2]

local MAX_TAGS = 50

local pairs_n = (#ARGV - 1) / 2
if pairs_n ~= math.floor(pairs_n) or pairs_n < 1 or pairs_n > MAX_TAGS then
  return fail(E_BAD_ARGUMENT, 'tags must be 1 to 50 key, value pairs')
end
if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local count = redis.call('HLEN', tags)
for i = 1, pairs_n do
  if redis.call('HEXISTS', tags, ARGV[2 * i]) == 0 then
    count = count + 1
  end
end
if count > MAX_TAGS then
  return fail(E_TAG_LIMIT, tostring(count))
end
for i = 1, pairs_n do
  redis.call('HSET', tags, ARGV[2 * i], ARGV[2 * i + 1])
end
return {OK, count}
