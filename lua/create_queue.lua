-- create_queue: create a queue's settings and tags, or report the existing settings.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] tags (hash): tag key -> value
-- KEYS[3] deleted (string): when a queue of this name was deleted (ms), for 60 s
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] '1': refuse a new queue within 60 s of the deletion of one of its
--         name (SQS's rule), '' to allow it
-- ARGV[3] settings_n (1-32): number of setting pairs that follow
-- ARGV[4..] settings_n field, value pairs: the full settings (and 'layout', 1 to
--           LAYOUT, for a queue in an older data layout), then
--           0 to 50 tag key, value pairs (set only when the queue is new)
--
-- Returns {OK, 1} when created; {OK, 0, field, value, ...} with the stored
-- settings when the queue already exists (the client compares them; its
-- tags stay as they are); or {E_DELETED_RECENTLY, ''} | {E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local tags = KEYS[2]
local deleted = KEYS[3]
local now = clock(ARGV[1])
local refuse_recent = ARGV[2] == '1'
local settings_n = int_arg(ARGV[3], 1, 32)

local MAX_TAGS = 50

if settings_n == nil then
  return fail(E_BAD_ARGUMENT, 'settings must be 1 to 32 field, value pairs')
end
local tags_n = (#ARGV - 3 - 2 * settings_n) / 2
if tags_n ~= math.floor(tags_n) or tags_n < 0 or tags_n > MAX_TAGS then
  return fail(E_BAD_ARGUMENT, 'tags must be 0 to 50 key, value pairs')
end

if redis.call('EXISTS', meta) == 1 then
  local layout = redis.call('HGET', meta, 'layout')
  if newer_layout(layout) then
    return fail(E_LAYOUT, layout)
  end
  local stored = redis.call('HGETALL', meta)
  local reply = {OK, 0}
  for i = 1, #stored do
    reply[#reply + 1] = stored[i]
  end
  return reply
end
if refuse_recent then
  local deleted_ms = tonumber(redis.call('GET', deleted))
  if deleted_ms ~= nil and now - deleted_ms < DELETED_MS then
    return fail(E_DELETED_RECENTLY)
  end
end

-- A 'layout' setting asks for an older layout (1 while 0.2.0 clients, which
-- read no layout, share the Redis); by default a queue starts in the newest.
local layout = LAYOUT
for i = 1, settings_n do
  if ARGV[2 * i + 2] == 'layout' then
    layout = int_arg(ARGV[2 * i + 3], 1, LAYOUT)
    if layout == nil then
      return fail(E_BAD_ARGUMENT, 'layout must be 1 to ' .. LAYOUT)
    end
  end
end
for i = 1, settings_n do
  redis.call('HSET', meta, ARGV[2 * i + 2], ARGV[2 * i + 3])
end
redis.call('HSET', meta, 'created_ms', now, 'modified_ms', now, 'ghosts', 0, 'layout', layout)
-- A queue of this name deleted before may have left no tags (delete_queue
-- drops them), but start clean in any case.
redis.call('DEL', tags)
local base = 3 + 2 * settings_n
for i = 1, tags_n do
  redis.call('HSET', tags, ARGV[base + 2 * i - 1], ARGV[base + 2 * i])
end
return {OK, 1}
