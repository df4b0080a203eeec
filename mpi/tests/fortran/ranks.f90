! A Fortran MPI program built with MPICH's mpif90 (its Fortran library,
! libmpichfort.so.12, over fm's libmpich.so.12): point-to-point with a
! status and with MPI_STATUS_IGNORE, a communicator split in reversed
! order, a derived type (every other element of an array), a broadcast and
! an allreduce on the split; attributes as Fortran has them (a predefined
! one's value, a keyval with MPI_COMM_DUP_FN and a delete function of its
! own, through MPICH's MPII_ helpers). Each rank prints what it got, one
! line each; the output is the same under fmrun and under mpiexec.mpich.
! Needs an even number of ranks, at least 2.
module deletions
  implicit none
  integer :: deleted = 0
contains
  subroutine count_delete(comm, keyval, value, extra, ierr)
    use mpi
    integer :: comm, keyval, ierr
    integer(kind=MPI_ADDRESS_KIND) :: value, extra
    deleted = deleted + int(value)
    ierr = MPI_SUCCESS
  end subroutine count_delete
end module deletions

program ranks
  use mpi
  use deletions
  implicit none
  integer :: ierr, rank, nranks, sub, subrank, subsize, every_other, i, total, peer
  integer :: key, copy, tag_ub_int
  integer(kind=MPI_ADDRESS_KIND) :: value, extra
  logical :: found
  integer :: status(MPI_STATUS_SIZE)
  double precision :: a(10), b(5)
  character(len=8) :: word

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)

  ! Even and odd ranks apart, each half in reversed order.
  call MPI_Comm_split(MPI_COMM_WORLD, mod(rank, 2), -rank, sub, ierr)
  call MPI_Comm_rank(sub, subrank, ierr)
  call MPI_Comm_size(sub, subsize, ierr)

  ! Rank r sends every other element of its array to its partner r xor 1.
  call MPI_Type_vector(5, 1, 2, MPI_DOUBLE_PRECISION, every_other, ierr)
  call MPI_Type_commit(every_other, ierr)
  do i = 1, 10
     a(i) = rank * 100 + i
  end do
  b = -1
  peer = ieor(rank, 1)
  if (mod(rank, 2) == 0) then
     call MPI_Send(a, 1, every_other, peer, 7, MPI_COMM_WORLD, ierr)
     call MPI_Recv(b, 5, MPI_DOUBLE_PRECISION, peer, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  else
     call MPI_Recv(b, 5, MPI_DOUBLE_PRECISION, peer, 7, MPI_COMM_WORLD, status, ierr)
     call MPI_Send(a, 1, every_other, peer, 8, MPI_COMM_WORLD, ierr)
     print '(A,I3,A,I3,A,I3)', 'rank', rank, ': status source', status(MPI_SOURCE), ' tag', status(MPI_TAG)
  end if
  print '(A,I3,A,5F7.0)', 'rank', rank, ': got', b

  ! The split's first member (the half's highest world rank) broadcasts.
  word = 'none'
  if (subrank == 0) write (word, '(A,I3)') 'from', rank
  call MPI_Bcast(word, 8, MPI_CHARACTER, 0, sub, ierr)
  call MPI_Allreduce(rank, total, 1, MPI_INTEGER, MPI_SUM, sub, ierr)
  print '(A,I3,A,I3,A,I3,A,A,A,I4)', 'rank', rank, ': sub rank', subrank, ' of', subsize, &
       ' bcast "', word, '" sum', total

  ! The predefined MPI_TAG_UB's value (MPI-2 and MPI-1 forms); a keyval
  ! whose value MPI_Comm_dup copies and whose deletions are counted.
  call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, value, found, ierr)
  call MPI_Attr_get(MPI_COMM_WORLD, MPI_TAG_UB, tag_ub_int, found, ierr)
  print '(A,I3,A,L2,A,L2)', 'rank', rank, ': tag_ub found', found, ' at least 32767', &
       value >= 32767 .and. tag_ub_int == value
  extra = 0
  call MPI_Comm_create_keyval(MPI_COMM_DUP_FN, count_delete, key, extra, ierr)
  value = rank + 1
  call MPI_Comm_set_attr(sub, key, value, ierr)
  call MPI_Comm_dup(sub, copy, ierr)
  value = -1
  call MPI_Comm_get_attr(copy, key, value, found, ierr)
  call MPI_Comm_free(copy, ierr)
  call MPI_Type_free(every_other, ierr)
  call MPI_Comm_free(sub, ierr)
  call MPI_Comm_free_keyval(key, ierr)
  print '(A,I3,A,L2,I4,A,I4)', 'rank', rank, ': copied attribute', found, int(value), &
       ' deleted', deleted
  call MPI_Finalize(ierr)
end program ranks
