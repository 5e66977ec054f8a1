-- history: the newest samples of a queue's counts, oldest first.
--
-- KEYS[1] meta (hash): the queue's settings (read: does the queue exist)
-- KEYS[2] history (list): "<bucket_ms>|<count>|..." samples, oldest first
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): the time the reply names
-- ARGV[2] limit (1-10000): samples to read, the newest ones
--
-- Reads only. Returns {OK, now_ms, sample...} or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local history = KEYS[2]
local now = clock(ARGV[1])
local limit = int_arg(ARGV[2], 1, 10000)

if limit == nil then
  return fail(E_BAD_ARGUMENT, 'limit must be 1-10000')
end
if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local reply = {OK, now}
local samples = redis.call('LRANGE', history, -limit, -1)
for i = 1, #samples do
  reply[#reply + 1] = samples[i]
end
return reply
