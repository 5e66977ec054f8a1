-- move_done: last step of a move: forget outbox entries the destination
-- has stored.
--
-- KEYS[1] outbox (hash): id -> message leaving for another queue
-- KEYS[2] outbox_at (zset): outbox ids scored by when their move began (ms)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): unused, kept for uniformity
-- ARGV[2] count (1-100): number of ids
-- ARGV[3..] ids
--
-- Returns {OK, removed_n} or {E_BAD_ARGUMENT, detail}.
local outbox = KEYS[1]
local outbox_at = KEYS[2]
local count = int_arg(ARGV[2], 1, 100)

if count == nil or #ARGV ~= 2 + count then
  return fail(E_BAD_ARGUMENT, 'move_done takes 1 to 100 ids')
end
local ids = {}
for i = 1, count do
  ids[i] = ARGV[2 + i]
end
redis.call('ZREM', outbox_at, unpack(ids))
return {OK, redis.call('HDEL', outbox, unpack(ids))}
