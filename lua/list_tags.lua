-- list_tags: the tags of a queue (at most 50: tag_queue keeps it so).
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] tags (hash): tag key -> value
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): unused, kept for uniformity
--
-- Returns {OK, key, value, ...} or {E_QUEUE_MISSING, ''}.
local meta = KEYS[1]
local tags = KEYS[2]

if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local stored = redis.call('HGETALL', tags)
local reply = {OK}
for i = 1, #stored do
  reply[#reply + 1] = stored[i]
end
return reply
