-- swap_attribute: change a stored SQS attribute only if it is still what the
-- caller read (compare and set), so that a read-modify-write of a value such
-- as Policy never loses a change made meanwhile.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] field ('x:<name>'): the stored attribute
-- ARGV[3] expected (string): its value as read, '' for not set
-- ARGV[4] value (string): its new value, '' removes it
--
-- Returns {OK, 1} when changed, {OK, 0, current} when the value is no
-- longer the one expected (nothing written), or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local now = clock(ARGV[1])
local field = ARGV[2]
local expected = ARGV[3]
local value = ARGV[4]

if value == nil or string.sub(field, 1, 2) ~= 'x:' then
  return fail(E_BAD_ARGUMENT, 'field must be x:<name>, with expected and new values')
end
if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local current = redis.call('HGET', meta, field) or ''
if current ~= expected then
  return {OK, 0, current}
end
if value == '' then
  redis.call('HDEL', meta, field)
else
  redis.call('HSET', meta, field, value)
end
redis.call('HSET', meta, 'modified_ms', now)
return {OK, 1}
