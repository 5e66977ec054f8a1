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

local reply = {OK}
local deleted, stale, ghosts = 0, 0, 0
for i = 1, count do
  local id = ARGV[2 * i + 2]
  local token = ARGV[2 * i + 3]
  local current = redis.call('HGET', state, id)
  local status
  if current == false then
    if redis.call('HEXISTS', messages, id) == 1 then
      -- Stored but never received: no receipt of it can be current.
      status = STALE_IGNORED
    else
      status = ALREADY_GONE
    end
  else
    local held_by, receive_count = parse_state(current)
    if held_by ~= token then
      status = STALE_IGNORED
      emit(events, events_max, now, 'stale_receipt', id, receive_count, 'delete')
    else
      status = DELETED
      if redis.call('ZREM', inflight, id) == 0 then
        ghosts = ghosts + 1
      end
      redis.call('HDEL', messages, id)
      redis.call('HDEL', state, id)
      redis.call('HDEL', origins, id)
      emit(events, events_max, now, 'deleted', id, receive_count)
    end
  end
  if status == DELETED then
    deleted = deleted + 1
  elseif status == STALE_IGNORED then
    stale = stale + 1
  end
  reply[i + 1] = status
end
if deleted > 0 then
  redis.call('HINCRBY', stats, 'deleted', deleted)
end
if stale > 0 then
  redis.call('HINCRBY', stats, 'stale_receipts', stale)
end
if ghosts > 0 then
  redis.call('HINCRBY', meta, 'ghosts', ghosts)
end
if was_full and deleted > 0 then
  -- Long polls waiting on the in-flight limit may go on.
  redis.call('PUBLISH', wake_channel, '1')
end
return reply
