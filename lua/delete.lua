-- delete: delete 1 to 10 messages by receipt.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] inflight (zset): in flight, scored by visibility expiry (ms): ids, or
--         "<id>:<token>" when the receipt's token holds a '.' (a first receive, layout 2)
-- KEYS[3] messages (hash): id -> record
-- KEYS[4] state (hash): id -> "<token>|<receive_count>|<first_ms>|<receive_ms>"
-- KEYS[5] stats (hash): counters
-- KEYS[6] events (stream): lifecycle events
-- KEYS[7] origins (hash): id -> queue a moved message came from
-- KEYS[8] fifo (hash): FIFO queues: id -> "<group> <seq> <sent_ms>"
-- KEYS[9] ordered (zset): FIFO queues: "<group> <seq> <id>", each group's messages in order
-- KEYS[10] groups (hash): FIFO queues: group -> 'r' | 'w' | messages in flight
-- KEYS[11] ready (list): FIFO queues: groups whose head may be received
-- KEYS[12] waiting (zset): FIFO queues: groups whose head is delayed
-- KEYS[13] delayed (zset): FIFO queues: ids sent while the queue had a delay
-- KEYS[14] tenants (hash): fair queues: group -> its messages in flight
-- KEYS[15] group_of (hash): fair queues: id -> group, of grouped messages in flight
-- KEYS[16] noisy (zset): fair queues: groups with messages set aside, by their messages in flight
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] wake_channel (string): Pub/Sub channel that wakes long polls
-- ARGV[3] count (1-10): number of receipts
-- ARGV[4..] per receipt, 2 entries: id, token
--
-- The newest receipt of a message deletes it, in flight or visible again
-- (the work is done; a redelivery would repeat it), except on a FIFO queue,
-- where a receipt whose timeout ran out is refused (as SQS does). A visible message leaves
-- its id in the visible list as a ghost that receive skips (a FIFO queue
-- drops it from its group, and unlocks the group when it held the group's
-- last message in flight). An older receipt
-- deletes nothing, succeeds as in SQS, and is counted as a stale receipt.
--
-- Returns {OK, status_1, ..., status_n}, each DELETED, ALREADY_GONE,
-- STALE_IGNORED or E_RECEIPT_EXPIRED; or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local inflight = KEYS[2]
local messages = KEYS[3]
local state = KEYS[4]
local stats = KEYS[5]
local events = KEYS[6]
local origins = KEYS[7]
local fifo = KEYS[8]
local ordered = KEYS[9]
local groups = KEYS[10]
local ready = KEYS[11]
local waiting = KEYS[12]
local delayed = KEYS[13]
local tenants = KEYS[14]
local group_of = KEYS[15]
local noisy = KEYS[16]
local wake_channel = ARGV[2]
local count = int_arg(ARGV[3], 1, 10)

if count == nil or #ARGV ~= 3 + 2 * count then
  return fail(E_BAD_ARGUMENT, 'delete takes 1 to 10 receipts of 2 arguments')
end
local settings = redis.call('HMGET', meta, 'events_max', 'inflight_limit', 'fifo', 'delay_ms', 'layout', 'fair')
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(settings[5]) then
  return fail(E_LAYOUT, settings[5])
end
local events_max = tonumber(settings[1])
local evented = events_max > 0
local inflight_limit = tonumber(settings[2]) or 120000
local is_fifo = settings[3] == '1'
local delay_ms = tonumber(settings[4]) or 0
local members_hold_state = takes_inline(settings[5]) and not is_fifo
-- Only events and FIFO queues need the time: a standard queue's delete reads no clock.
local now = (evented or is_fifo) and clock(ARGV[1]) or 0
local was_full = redis.call('ZCARD', inflight) >= inflight_limit
local find, sub = string.find, string.sub

-- First receives in layout 2 (a token with a '.'): their members, looked up in one call. A
-- member found means no state: the state leaves the member only when the member goes.
local ids, members, member_of = {}, {}, {}
for i = 1, count do
  ids[i] = ARGV[2 * i + 2]
  local token = ARGV[2 * i + 3]
  if find(token, '.', 1, true) then
    member_of[i] = ids[i] .. ':' .. token
    members[#members + 1] = member_of[i]
  end
end
local member_expiry = {}
if #members > 0 then
  local scores = redis.call('ZMSCORE', inflight, unpack(members))
  for j = 1, #members do
    member_expiry[members[j]] = scores[j]
  end
end
-- The states of the others, in one call.
local states, rest = {}, {}
for i = 1, count do
  if not (member_of[i] and member_expiry[member_of[i]]) then
    rest[#rest + 1] = i
  end
end
if #rest > 0 then
  local asked = {}
  for j = 1, #rest do
    asked[j] = ids[rest[j]]
  end
  local found = redis.call('HMGET', state, unpack(asked))
  for j = 1, #rest do
    states[rest[j]] = found[j]
  end
end

local reply = {OK}
local doomed = {}
-- What to take out of `inflight` for each doomed id: the id, or its layout 2 member.
local doomed_members = {}
local doomed_seen = {}
local doomed_stated = 0  -- doomed with an entry in `state`
local stale = 0
for i = 1, count do
  local id = ids[i]
  local token = ARGV[2 * i + 3]
  local status
  -- A receipt that deletes names what leaves `inflight` (the id, or a first receive's member),
  -- and the message's `state` entry (none for a member).
  local leaving, stored_state
  local member = member_of[i]
  local expiry = member and member_expiry[member]
  if expiry then
    -- In flight on its first receive, under this receipt.
    if is_fifo and tonumber(expiry) <= now then
      status = E_RECEIPT_EXPIRED
    else
      status = DELETED
      leaving = member
    end
  elseif states[i] == false then
    if redis.call('HEXISTS', messages, id) == 1 then
      -- Stored but never received, or (layout 2) in flight on its first receive under
      -- another token: no receipt of it can be current.
      status = STALE_IGNORED
      if evented and members_hold_state then
        emit(events, events_max, now, 'stale_receipt', id, 1, 'delete')
      end
    else
      status = ALREADY_GONE
    end
  else
    -- The state's token, up to its first '|' (a plain find: no pattern, no numbers).
    local bar = find(states[i], '|', 1, true) or 1
    local held_by = sub(states[i], 1, bar - 1)
    local expiry = is_fifo and redis.call('ZSCORE', inflight, id)
    if held_by ~= token then
      status = STALE_IGNORED
      if evented then
        local _, receive_count = parse_state(states[i])
        emit(events, events_max, now, 'stale_receipt', id, receive_count, 'delete')
      end
    elseif is_fifo and (expiry == false or tonumber(expiry) <= now) then
      -- As SQS: on a FIFO queue a receipt whose timeout ran out deletes nothing.
      status = E_RECEIPT_EXPIRED
    else
      status = DELETED
      leaving, stored_state = id, states[i]
    end
  end
  -- Its message once, whatever the batch repeats (inline: a function call a receipt costs).
  if leaving and not doomed_seen[id] then
    doomed_seen[id] = true
    doomed[#doomed + 1] = id
    doomed_members[#doomed] = leaving
    if stored_state then
      doomed_stated = doomed_stated + 1
    end
    if evented then
      local _, receive_count = parse_state(stored_state or '|1|0|0')
      emit(events, events_max, now, 'deleted', id, receive_count)
    end
  end
  if status == STALE_IGNORED then
    stale = stale + 1
  end
  reply[i + 1] = status
end

local unlocked = false
if #doomed > 0 and is_fifo then
  local k = {meta = meta, fifo = fifo, ordered = ordered, groups = groups,
    ready = ready, waiting = waiting, delayed = delayed, inflight = inflight}
  for i = 1, #doomed do
    local was_inflight = redis.call('ZREM', inflight, doomed_members[i]) == 1
    local group = fifo_forget(k, doomed[i])
    if was_inflight and group and fifo_release(k, group, now, delay_ms) then
      unlocked = true
    end
  end
  redis.call('HDEL', messages, unpack(doomed))
  redis.call('HDEL', state, unpack(doomed))
  redis.call('HDEL', origins, unpack(doomed))
  redis.call('HINCRBY', stats, 'deleted', #doomed)
  if was_full or unlocked then
    -- Long polls waiting on the in-flight limit or on the group may go on.
    redis.call('PUBLISH', wake_channel, '1')
  end
elseif #doomed > 0 then
  -- Ids deleted but not in flight are visible again: ghosts in the list.
  local ghosts = #doomed - redis.call('ZREM', inflight, unpack(doomed_members))
  if settings[6] == '1' then
    release_groups({tenants = tenants, group_of = group_of, noisy = noisy}, doomed)
  end
  redis.call('HDEL', messages, unpack(doomed))
  if doomed_stated > 0 then
    redis.call('HDEL', state, unpack(doomed))
  end
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
