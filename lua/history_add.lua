-- history_add: keep one sample of a queue's counts in its history, once per step.
--
-- KEYS[1] meta (hash): the queue's settings (read: does the queue exist)
-- KEYS[2] history (list): "<bucket_ms>|<count>|..." samples, oldest first
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] step_ms (1000-3600000): one sample per step; the bucket is now
--         rounded down to a whole step
-- ARGV[3] keep (1-10000): samples kept; the oldest go beyond that
-- ARGV[4] sample (at most 300 bytes of digits and '|'): the counts, in the
--         order the caller reads them back
--
-- Any number of `smq serve` processes may sample the same queue: the first
-- sample of a bucket is kept, later ones of that bucket are dropped, so the
-- history has one sample per step whoever took it. A deleted queue gets no
-- history key back. Returns {OK, kept (0|1)} or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local history = KEYS[2]
local now = clock(ARGV[1])
local step_ms = int_arg(ARGV[2], 1000, 3600000)
local keep = int_arg(ARGV[3], 1, 10000)
local sample = ARGV[4]

if step_ms == nil or keep == nil then
  return fail(E_BAD_ARGUMENT, 'step_ms must be 1000-3600000 and keep 1-10000')
end
if #sample > 300 or not string.match(sample, '^[%d|]+$') then
  return fail(E_BAD_ARGUMENT, 'a sample is digits and |, at most 300 bytes')
end
if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local bucket = now - now % step_ms
local last = redis.call('LRANGE', history, -1, -1)[1]
if last and (tonumber(string.match(last, '^(%d+)|')) or 0) >= bucket then
  return {OK, 0}
end
redis.call('RPUSH', history, bucket .. '|' .. sample)
-- Normally one over; a smaller keep than before trims a few per call.
local over = math.min(redis.call('LLEN', history) - keep, 10)
for _ = 1, over do
  redis.call('LPOP', history)
end
return {OK, 1}
