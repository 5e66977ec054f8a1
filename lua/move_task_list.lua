-- move_task_list: the most recent message move tasks of this (source) queue.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] tasks (hash): token -> task record (see common.lua), 'order' ->
--         the tokens of the last 10 tasks, oldest first, 16 characters each
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] limit (1-10): tasks to return at most
--
-- Returns {OK, now_ms, [token, record] * n}, newest first, or
-- {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local tasks = KEYS[2]
local now = clock(ARGV[1])
local limit = int_arg(ARGV[2], 1, 10)

local TOKEN_LEN = 16

if limit == nil then
  return fail(E_BAD_ARGUMENT, 'limit must be 1 to 10')
end
if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
local layout = redis.call('HGET', meta, 'layout')
if newer_layout(layout) then
  return fail(E_LAYOUT, layout)
end
local order = redis.call('HGET', tasks, 'order') or ''
local n = math.floor(#order / TOKEN_LEN)
local take = math.min(n, limit)
local reply = {OK, now}
for i = 1, take do
  local start = (n - i) * TOKEN_LEN + 1
  local token = string.sub(order, start, start + TOKEN_LEN - 1)
  local record = redis.call('HGET', tasks, token)
  if record then
    reply[#reply + 1] = token
    reply[#reply + 1] = record
  end
end
return reply
