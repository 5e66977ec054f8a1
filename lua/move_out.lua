-- move_out: first step of a move to other queues (redrive): take up to 100
-- visible messages out of this queue into its outbox.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): ids of visible messages (taken from the head)
-- KEYS[3] messages (hash): id -> record "<sent_ms>|<payload>"
-- KEYS[4] state (hash): id -> receive state
-- KEYS[5] stats (hash): counters
-- KEYS[6] events (stream): lifecycle events
-- KEYS[7] outbox (hash): id -> "<token>|<dest>|<origin>|<count>|<first_ms>|<record>"
-- KEYS[8] outbox_at (zset): outbox ids scored by when their move began (ms)
-- KEYS[9] origins (hash): id -> queue a moved message came from
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] max_messages (1-100)
-- ARGV[3] token (string, unique per call): names the move, for idempotency
-- ARGV[4] destination (queue name, or '' for each message's origin)
-- ARGV[5] queue_name (string): this queue, for messages with no origin
--
-- A message with no destination (no origin and none given) stays here.
-- Returns {OK, popped_n, live_n, [id, outbox_entry] * moved_n}: popped_n
-- counts every id taken from the list, live_n those that were not deleted;
-- or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local visible = KEYS[2]
local messages = KEYS[3]
local state = KEYS[4]
local stats = KEYS[5]
local events = KEYS[6]
local outbox = KEYS[7]
local outbox_at = KEYS[8]
local origins = KEYS[9]
local now = clock(ARGV[1])
local max_messages = int_arg(ARGV[2], 1, 100)
local token = ARGV[3]
local destination = ARGV[4]
local queue_name = ARGV[5]

if max_messages == nil or token == '' then
  return fail(E_BAD_ARGUMENT, 'bad max_messages or token')
end
local settings = redis.call('HMGET', meta, 'events_max', 'ghosts')
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
local events_max = tonumber(settings[1])

local ids = redis.call('LPOP', visible, max_messages)
if not ids then
  return {OK, 0, 0}
end
local records = redis.call('HMGET', messages, unpack(ids))
local from = redis.call('HMGET', origins, unpack(ids))
local reply = {OK, #ids, 0}
local ghosts, kept = 0, {}
for i = 1, #ids do
  local id = ids[i]
  local dest = destination
  if dest == '' then
    dest = from[i] or ''
  end
  if not records[i] then
    ghosts = ghosts + 1
  elseif dest == '' or dest == queue_name then
    kept[#kept + 1] = id
  else
    -- A redriven message starts over: no receives yet.
    local entry = token .. '|' .. dest .. '|' .. queue_name .. '|0|0|' .. records[i]
    redis.call('HSET', outbox, id, entry)
    redis.call('ZADD', outbox_at, now, id)
    redis.call('HDEL', messages, id)
    redis.call('HDEL', state, id)
    redis.call('HDEL', origins, id)
    reply[#reply + 1] = id
    reply[#reply + 1] = entry
    emit(events, events_max, now, 'moved_out', id, 0, dest)
  end
end
if #kept > 0 then
  -- Back to the tail, so the next call moves on to other messages.
  redis.call('RPUSH', visible, unpack(kept))
end
if ghosts > 0 then
  redis.call('HINCRBY', meta, 'ghosts', -ghosts)
end
reply[3] = #ids - ghosts
return reply
