-- change_visibility: set the visibility timeout of 1 to 10 received messages,
-- counted from now, for the receipt given only.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): ids of visible messages (timeout 0 puts one at the head)
-- KEYS[3] inflight (zset): in flight, scored by visibility expiry (ms): ids, or
--         "<id>:<token>" when the receipt's token holds a '.' (a first receive, layout 2)
-- KEYS[4] state (hash): id -> "<token>|<receive_count>|<first_ms>|<receive_ms>"
-- KEYS[5] stats (hash): counters
-- KEYS[6] events (stream): lifecycle events
-- KEYS[7] fifo (hash): FIFO queues: id -> "<group> <seq> <sent_ms>"
-- KEYS[8] ordered (zset): FIFO queues: "<group> <seq> <id>", each group's messages in order
-- KEYS[9] groups (hash): FIFO queues: group -> 'r' | 'w' | messages in flight
-- KEYS[10] ready (list): FIFO queues: groups whose head may be received
-- KEYS[11] waiting (zset): FIFO queues: groups whose head is delayed
-- KEYS[12] delayed (zset): FIFO queues: ids sent while the queue had a delay
-- KEYS[13] messages (hash): id -> record (read: is the message stored; its group)
-- KEYS[14] tenants (hash): fair queues: group -> its messages in flight
-- KEYS[15] group_of (hash): fair queues: id -> group, of grouped messages in flight
-- KEYS[16] noisy (zset): fair queues: groups with messages set aside, by their messages in flight
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] wake_channel (string): Pub/Sub channel that wakes long polls
-- ARGV[3] count (1-10): number of changes
-- ARGV[4..] per change, 3 entries: id, token, visibility_ms (0-43200000)
--
-- Timeout 0 on a FIFO queue leaves the message at its place in its group and
-- unlocks the group when no other message of it is in flight.
-- The newest receipt may change a message whose timeout ran out while nobody
-- received it since (a standard queue hides it again; a FIFO queue refuses
-- with E_RECEIPT_EXPIRED, as SQS does).
-- Returns {OK, status_1, ..., status_n}, each status one of OK,
-- E_NOT_INFLIGHT (deleted, or never received; in layout 2 a message never
-- received that is stored in `messages` answers E_STALE_RECEIPT), E_STALE_RECEIPT (received
-- again since, or a token that was never the message's), E_RECEIPT_EXPIRED, E_CEILING (would pass 12 h after that receive);
-- or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local state = KEYS[4]
local stats = KEYS[5]
local events = KEYS[6]
local fifo = KEYS[7]
local ordered = KEYS[8]
local groups = KEYS[9]
local ready = KEYS[10]
local waiting = KEYS[11]
local delayed = KEYS[12]
local messages = KEYS[13]
local tenants = KEYS[14]
local group_of = KEYS[15]
local noisy = KEYS[16]
local k = {meta = meta, fifo = fifo, ordered = ordered, groups = groups,
  ready = ready, waiting = waiting, delayed = delayed, inflight = inflight}
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
local settings = redis.call('HMGET', meta, 'events_max', 'fifo', 'delay_ms', 'layout', 'fair')
local fair = settings[5] == '1'
local members_hold_state = takes_inline(settings[4]) and settings[2] ~= '1'
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(settings[4]) then
  return fail(E_LAYOUT, settings[4])
end
local events_max = tonumber(settings[1])
local is_fifo = settings[2] == '1'
local delay_ms = tonumber(settings[3]) or 0

local reply = {OK}
local changed, sooner = 0, 0
for i = 1, count do
  local id = ARGV[3 * i + 1]
  local token = ARGV[3 * i + 2]
  local visibility_ms = tonumber(ARGV[3 * i + 3])
  local current = redis.call('HGET', state, id)
  local member = id
  if current == false and token_in_member(token) then
    -- A first receive's state is in its member, when it is still in flight.
    member = id .. ':' .. token
    if redis.call('ZSCORE', inflight, member) then
      local _, _, received_ms = split_member(member)
      current = format_state(token, 1, received_ms, received_ms)
    end
  end
  local expiry = redis.call('ZSCORE', inflight, member)
  local status = OK
  if current == false and members_hold_state and redis.call('HEXISTS', messages, id) == 1 then
    -- Stored, with no state: in flight on its first receive under another token (a first
    -- receive's member is found by its token alone), or never received. Either way the
    -- receipt is not the message's current one.
    status = E_STALE_RECEIPT
    redis.call('HINCRBY', stats, 'stale_receipts', 1)
    emit(events, events_max, now, 'stale_receipt', id, 1, 'change')
  elseif current == false then
    -- Deleted, or never received.
    status = E_NOT_INFLIGHT
  else
    local held_by, receive_count, first_ms, received_ms = parse_state(current)
    local expired = expiry == false or tonumber(expiry) <= now
    if held_by ~= token then
      status = E_STALE_RECEIPT
      redis.call('HINCRBY', stats, 'stale_receipts', 1)
      emit(events, events_max, now, 'stale_receipt', id, receive_count, 'change')
    elseif expired and is_fifo then
      -- As SQS: a FIFO receipt whose timeout ran out can no longer act.
      status = E_RECEIPT_EXPIRED
    elseif now + visibility_ms > received_ms + CEILING_MS then
      status = E_CEILING
    elseif expiry == false then
      -- The newest receipt after its timeout ran out, and nobody received the
      -- message since: it is in the visible list. As SQS does, hide it again.
      -- Its list entry stays, counted as a ghost: receive skips an id that is
      -- in flight while there are ghosts (no O(n) removal from the list).
      if visibility_ms > 0 then
        redis.call('ZADD', inflight, now + visibility_ms, id)
        redis.call('HINCRBY', meta, 'ghosts', 1)
        local group = fair and not is_fifo and record_group(redis.call('HGET', messages, id) or '')
        if group then
          -- In flight again: its group holds one more.
          redis.call('HSET', group_of, id, group)
          local held = redis.call('HINCRBY', tenants, group, 1)
          redis.call('ZADD', noisy, 'XX', held, group)
        end
        sooner = sooner + 1  -- waiting long polls learn of the new expiry
      end
      changed = changed + 1
      emit(events, events_max, now, 'visibility_changed', id, receive_count, visibility_ms)
    else
      if visibility_ms == 0 then
        redis.call('ZREM', inflight, member)
        if member ~= id then
          -- Visible again: its state leaves the member, as reclaim_visible does.
          redis.call('HSET', state, id, current)
        end
        if fair and not is_fifo then
          release_groups({tenants = tenants, group_of = group_of, noisy = noisy}, {id})
        end
        if is_fifo then
          local info = redis.call('HGET', k.fifo, id)
          if info then
            fifo_release(k, parse_fifo(info), now, delay_ms)
          end
        else
          redis.call('LPUSH', visible, id)
        end
        sooner = sooner + 1
      else
        redis.call('ZADD', inflight, 'XX', now + visibility_ms, member)
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
