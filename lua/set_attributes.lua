-- set_attributes: change settings of an existing queue.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2..] field, value pairs (at most 32 pairs): settings to change; an
--           empty value of a stored SQS attribute (field 'x:<name>') removes it
--
-- A change of 'dedup_scope' is reported from then on, while deduplication keeps
-- the scope the queue was created with (kept in 'dedup_by' at the first change).
--
-- Returns {OK} or {E_QUEUE_MISSING, ''}.
local meta = KEYS[1]
local now = clock(ARGV[1])

local pairs_n = (#ARGV - 1) / 2
if pairs_n ~= math.floor(pairs_n) or pairs_n < 1 or pairs_n > 32 then
  return fail(E_BAD_ARGUMENT, 'settings must be 1 to 32 field, value pairs')
end
if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
for i = 2, #ARGV, 2 do
  if ARGV[i] == 'dedup_scope' and redis.call('HEXISTS', meta, 'dedup_by') == 0 then
    -- As on SQS, a FIFO queue deduplicates by the scope it was created with: a later
    -- DeduplicationScope is reported, not applied. The first change keeps the original.
    redis.call('HSET', meta, 'dedup_by', redis.call('HGET', meta, 'dedup_scope') or 'queue')
  end
  if ARGV[i + 1] == '' and string.sub(ARGV[i], 1, 2) == 'x:' then
    redis.call('HDEL', meta, ARGV[i])
  else
    redis.call('HSET', meta, ARGV[i], ARGV[i + 1])
  end
end
redis.call('HSET', meta, 'modified_ms', now)
return {OK}
