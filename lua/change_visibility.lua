-- change_visibility: set the visibility timeout of 1 to 10 received messages,
-- counted from now, for the receipt given only.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): ids of visible messages (timeout 0 puts one at the head)
-- KEYS[3] inflight (zset): ids in flight, scored by visibility expiry (ms)
-- KEYS[4] state (hash): id -> "<token>|<receive_count>|<first_ms>|<receive_ms>"
-- KEYS[5] stats (hash): counters
-- KEYS[6] events (stream): lifecycle events
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] wake_channel (string): Pub/Sub channel that wakes long polls
-- ARGV[3] count (1-10): number of changes
-- ARGV[4..] per change, 3 entries: id, token, visibility_ms (0-43200000)
--
-- Returns {OK, status_1, ..., status_n}, each status one of OK,
-- E_NOT_INFLIGHT (visible again, or deleted), E_STALE_RECEIPT (in flight
-- under a newer receipt), E_CEILING (would pass 12 h after that receive);
-- or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local state = KEYS[4]
local stats = KEYS[5]
local events = KEYS[6]
local now = clock(ARGV[1])
local wake_channel = ARGV[2]
local count = int_arg(ARGV[3], 1, 10)

if count == nil or #ARGV ~= 3 + 3 * count then
  return fail(E_BAD_ARGUMENT, 'change_visibility takes 1 to 10 changes of 3 arguments')
end
for i = 1, count do
  if int_arg(ARGV[3 * i + 3], 0, CEILING_MS) == nil then
    return fail(E_BAD_ARGUMENT, 'bad visibility_ms for change ' .. i)
  end
end
local events_max = redis.call('HGET', meta, 'events_max')
if events_max == false then
  return fail(E_QUEUE_MISSING)
end
events_max = tonumber(events_max)

local reply = {OK}
local changed, sooner = 0, 0
for i = 1, count do
  local id = ARGV[3 * i + 1]
  local token = ARGV[3 * i + 2]
  local visibility_ms = tonumber(ARGV[3 * i + 3])
  local current = redis.call('HGET', state, id)
  local expiry = redis.call('ZSCORE', inflight, id)
  local status = OK
  if current == false or expiry == false or tonumber(expiry) <= now then
    -- Deleted, never received, visible again, or expired and not yet reclaimed.
    status = E_NOT_INFLIGHT
  else
    local held_by, receive_count, first_ms, received_ms = parse_state(current)
    if held_by ~= token then
      status = E_STALE_RECEIPT
      redis.call('HINCRBY', stats, 'stale_receipts', 1)
      emit(events, events_max, now, 'stale_receipt', id, receive_count, 'change')
    elseif now + visibility_ms > received_ms + CEILING_MS then
      status = E_CEILING
    else
      if visibility_ms == 0 then
        redis.call('ZREM', inflight, id)
        redis.call('LPUSH', visible, id)
        sooner = sooner + 1
      else
        redis.call('ZADD', inflight, 'XX', now + visibility_ms, id)
        if now + visibility_ms < tonumber(expiry) then
          sooner = sooner + 1
        end
      end
      changed = changed + 1
      emit(events, events_max, now, 'visibility_changed', id, receive_count, visibility_ms)
    end
  end
  reply[i + 1] = status
end
if changed > 0 then
  redis.call('HINCRBY', stats, 'visibility_changed', changed)
end
if sooner > 0 then
  -- Long polls wake: to receive, or to sleep until the sooner expiry.
  redis.call('PUBLISH', wake_channel, '1')
end
return reply
