-- untag_queue: remove tags of a queue by key; keys it does not have are ignored.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] tags (hash): tag key -> value
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): unused, kept for uniformity
-- ARGV[2..] tag keys (1 to 1000)
--
-- Returns {OK, removed_n} or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local tags = KEYS[2]

local keys_n = #ARGV - 1
if keys_n < 1 or keys_n > 1000 then
  return fail(E_BAD_ARGUMENT, 'untag takes 1 to 1000 keys')
end
if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local removed = 0
for i = 1, keys_n do
  removed = removed + redis.call('HDEL', tags, ARGV[i + 1])
end
return {OK, removed}
