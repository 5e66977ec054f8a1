-- move_task_start: record a new message move task of this (source) queue,
-- unless one is active; keep the last 10 tasks.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): ids of visible messages
-- KEYS[3] inflight (zset): ids in flight, scored by visibility expiry (ms)
-- KEYS[4] delayed (zset): ids of delayed messages, scored by due time (ms)
-- KEYS[5] tasks (hash): token -> task record (see common.lua), 'active' ->
--         token of the running or cancelling task, 'order' -> the tokens
--         of the last 10 tasks, oldest first, 16 characters each
-- KEYS[6] messages (hash): id -> record (FIFO queues: counted to find the visible)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] token (16 of [A-Za-z0-9_-], random): names the task
-- ARGV[3] destination (queue name, or '' for each message's origin)
-- ARGV[4] max_per_second (0-500; 0 = as fast as possible)
--
-- The task starts RUNNING with no runner; to_move is the number of visible
-- messages now (counted as get_attributes counts them). Moving is the
-- runner's job. Returns {OK, now_ms, record}, or {E_TASK_ACTIVE, token of the
-- active task}, or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local delayed = KEYS[4]
local tasks = KEYS[5]
local messages = KEYS[6]
local now = clock(ARGV[1])
local token = ARGV[2]
local destination = ARGV[3]
local rate = int_arg(ARGV[4], 0, 500)

local KEEP = 10
local TOKEN_LEN = 16

if rate == nil or #token ~= TOKEN_LEN or string.find(token, '^[%w_-]+$') == nil or
   string.find(destination, '^[%w_.:-]*$') == nil then
  return fail(E_BAD_ARGUMENT, 'bad token, destination or max_per_second')
end
local stored = redis.call('HMGET', meta, 'ghosts', 'layout')
local ghosts = stored[1]
if ghosts == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(stored[2]) then
  return fail(E_LAYOUT, stored[2])
end
local active = redis.call('HGET', tasks, 'active')
if active then
  local record = redis.call('HGET', tasks, active)
  if record and task_is_active(parse_task(record)) then
    return fail(E_TASK_ACTIVE, active)
  end
end
if redis.call('HEXISTS', tasks, token) == 1 then
  return fail(E_BAD_ARGUMENT, 'task token in use')
end

local to_move
if redis.call('HGET', meta, 'fifo') == '1' then
  -- Stored and not in flight (a FIFO queue keeps no list of the visible).
  to_move = redis.call('HLEN', messages) - redis.call('ZCOUNT', inflight, '(' .. now, '+inf')
else
  to_move = redis.call('LLEN', visible) - tonumber(ghosts) +
    redis.call('ZCOUNT', inflight, '-inf', now) + redis.call('ZCOUNT', delayed, '-inf', now)
end
if to_move < 0 then
  to_move = 0
end

local order = redis.call('HGET', tasks, 'order') or ''
if #order >= KEEP * TOKEN_LEN then
  redis.call('HDEL', tasks, string.sub(order, 1, TOKEN_LEN))
  order = string.sub(order, #order - (KEEP - 1) * TOKEN_LEN + 1)
end
local record = format_task({status = 'RUNNING', moved = 0, processed = 0, to_move = to_move,
  started = now, rate = rate, owner = '', lease = 0, next_ms = 0, destination = destination, reason = ''})
redis.call('HSET', tasks, token, record, 'active', token, 'order', order .. token)
return {OK, now, record}
