-- create_queue: create a queue's settings, or report the existing ones.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2..] field, value pairs (at most 32 pairs): the full settings
--
-- Returns {OK, 1} when created; {OK, 0, field, value, ...} with the stored
-- settings when the queue already exists (the client compares them).
local meta = KEYS[1]
local now = clock(ARGV[1])

local pairs_n = (#ARGV - 1) / 2
if pairs_n ~= math.floor(pairs_n) or pairs_n < 1 or pairs_n > 32 then
  return fail(E_BAD_ARGUMENT, 'settings must be 1 to 32 field, value pairs')
end

if redis.call('EXISTS', meta) == 1 then
  local stored = redis.call('HGETALL', meta)
  local reply = {OK, 0}
  for i = 1, #stored do
    reply[#reply + 1] = stored[i]
  end
  return reply
end

for i = 2, #ARGV, 2 do
  redis.call('HSET', meta, ARGV[i], ARGV[i + 1])
end
redis.call('HSET', meta, 'created_ms', now, 'modified_ms', now, 'ghosts', 0)
return {OK, 1}
