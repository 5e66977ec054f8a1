-- delete: delete 1 to 10 messages by receipt.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] inflight (zset): ids in flight, scored by visibility expiry (ms)
-- KEYS[3] messages (hash): id -> record
-- KEYS[4] state (hash): id -> "<token>|<receive_count>|<first_ms>|<receive_ms>"
-- KEYS[5] stats (hash): counters
-- KEYS[6] events (stream): lifecycle events
-- KEYS[7] origins (hash): id -> queue a moved message came from
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] wake_channel (string): Pub/Sub channel that wakes long polls
-- ARGV[3] count (1-10): number of receipts
-- ARGV[4..] per receipt, 2 entries: id, token
--
-- The newest receipt of a message deletes it, in flight or visible again
-- (the work is done; a redelivery would repeat it). A visible message leaves
-- its id in the visible list as a ghost that receive skips. An older receipt
-- deletes nothing, succeeds as in SQS, and is counted as a stale receipt.
--
-- Returns {OK, status_1, ..., status_n}, each DELETED, ALREADY_GONE or
-- STALE_IGNORED; or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local inflight = KEYS[2]
local messages = KEYS[3]
local state = KEYS[4]
local stats = KEYS[5]
local events = KEYS[6]
local origins = KEYS[7]
local now = clock(ARGV[1])
local wake_channel = ARGV[2]
local count = int_arg(ARGV[3], 1, 10)

if count == nil or #ARGV ~= 3 + 2 * count then
  return fail(E_BAD_ARGUMENT, 'delete takes 1 to 10 receipts of 2 arguments')
end
local settings = redis.call('HMGET', meta, 'events_max', 'inflight_limit')
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
local events_max = tonumber(settings[1])
local inflight_limit = tonumber(settings[2]) or 120000
local was_full = redis.call('ZCARD', inflight) >= inflight_limit

local ids = {}
for i = 1, count do
  ids[i] = ARGV[2 * i + 2]
end
local states = redis.call('HMGET', state, unpack(ids))

local reply = {OK}
local doomed = {}
local doomed_seen = {}
local stale = 0
for i = 1, count do
  local id = ids[i]
  local status
  if states[i] == false then
    if redis.call('HEXISTS', messages, id) == 1 then
      -- Stored but never received: no receipt of it can be current.
      status = STALE_IGNORED
    else
      status = ALREADY_GONE
    end
  else
    local held_by, receive_count = parse_state(states[i])
    if held_by ~= ARGV[2 * i + 3] then
      status = STALE_IGNORED
      emit(events, events_max, now, 'stale_receipt', id, receive_count, 'delete')
    else
      status = DELETED
      if not doomed_seen[id] then
        doomed_seen[id] = true
        doomed[#doomed + 1] = id
        emit(events, events_max, now, 'deleted', id, receive_count)
      end
    end
  end
  if status == STALE_IGNORED then
    stale = stale + 1
  end
  reply[i + 1] = status
end

if #doomed > 0 then
  -- Ids deleted but not in flight are visible again: ghosts in the list.
  local ghosts = #doomed - redis.call('ZREM', inflight, unpack(doomed))
  redis.call('HDEL', messages, unpack(doomed))
  redis.call('HDEL', state, unpack(doomed))
  redis.call('HDEL', origins, unpack(doomed))
  redis.call('HINCRBY', stats, 'deleted', #doomed)
  if ghosts > 0 then
    redis.call('HINCRBY', meta, 'ghosts', ghosts)
  end
  if was_full then
    -- Long polls waiting on the in-flight limit may go on.
    redis.call('PUBLISH', wake_channel, '1')
  end
end
if stale > 0 then
  redis.call('HINCRBY', stats, 'stale_receipts', stale)
end
return reply
