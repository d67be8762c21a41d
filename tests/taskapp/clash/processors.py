from queueadmin.core.catalog import processor


@processor("taskapp.double")
def double_again(item):
    return item * 2
