-- move_done: last step of a move: forget outbox entries the destination
-- has stored.
--
-- KEYS[1] outbox (hash): id -> "<token>|<dest>|..." message leaving for another queue
-- KEYS[2] outbox_at (zset): outbox ids scored by when their move began (ms)
-- KEYS[3] meta (hash): the queue's settings (read: its data layout)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): unused, kept for uniformity
-- ARGV[2] count (1-100): number of entries
-- ARGV[3..] per entry, 2 entries: id, token (of the move being finished)
--
-- An entry is dropped only while it still belongs to that move: the same id
-- may have left again, under another token, since a slow step 2 began.
-- Returns {OK, removed_n} or {E_BAD_ARGUMENT, detail}.
local outbox = KEYS[1]
local outbox_at = KEYS[2]
local meta = KEYS[3]
local count = int_arg(ARGV[2], 1, 100)

if count == nil or #ARGV ~= 2 + 2 * count then
  return fail(E_BAD_ARGUMENT, 'move_done takes 1 to 100 id, token pairs')
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local ids = {}
for i = 1, count do
  ids[i] = ARGV[2 * i + 1]
end
local entries = redis.call('HMGET', outbox, unpack(ids))
local removed = 0
for i = 1, count do
  local token = ARGV[2 * i + 2]
  if entries[i] and string.sub(entries[i], 1, #token + 1) == token .. '|' then
    redis.call('HDEL', outbox, ids[i])
    redis.call('ZREM', outbox_at, ids[i])
    removed = removed + 1
  end
end
return {OK, removed}
